"""Command-line flags of run.py, under tensor2tensor's names (t2t-trainer, t2t-datagen,
t2t-decoder, t2t-bleu, t2t-avg-all, t2t-exporter).

Importing this module defines the flags on absl's global FLAGS once. Each section lists the
t2t tool the flags come from; defaults are t2t's unless the comment says why not.
"""
from typing import Any

from absl import flags

from t2t_lite import file_io
from t2t_lite.serving.config import ServerConfig

MODES = (
    "default",
    "datagen",
    "train",
    "eval",
    "train_and_eval",
    "decode",
    "bleu",
    "average",
    "export",
    "import_t2t",
    "plot",
    "attention",
    "serve",
    "query",
)

# t2t's --schedule values and the mode each maps to.
SCHEDULES = {
    "train": "train",
    "evaluate": "eval",
    "continuous_eval": "eval",
    "train_and_evaluate": "train_and_eval",
    "continuous_train_and_eval": "train_and_eval",
    "train_eval_and_decode": "train_and_eval",
}

FLAGS = flags.FLAGS

# --- What to run --------------------------------------------------------------------------
flags.DEFINE_enum(
    "mode", None, MODES,
    "What to do. Unset: --schedule decides when given, else the embedded default "
    "(generate an algorithmic problem, train transformer_tiny, evaluate, decode).")
flags.DEFINE_enum(
    "schedule", None, sorted(SCHEDULES),
    "t2t-trainer's schedule name; an alias of --mode for the training modes.")
flags.DEFINE_bool(
    "debug", False,
    "Show the Python traceback of a user error (bad flag, value or file) instead of the "
    "one line `error: ...`.")

# --- Common (t2t-trainer) -----------------------------------------------------------------
flags.DEFINE_string("problem", None, "Registered problem name, e.g. translate_ende_wmt32k.")
flags.DEFINE_string("model", "transformer", "Registered model name.")
flags.DEFINE_string("hparams_set", None, "Registered hparams set, e.g. transformer_base.")
flags.DEFINE_string("hparams", "", 'Overrides of the hparams set: "a=1,b=2,c=[1,2]".')
flags.DEFINE_string("data_dir", None, "Directory of the generated TFRecord shards and vocab.")
flags.DEFINE_string("tmp_dir", "/tmp/t2t_datagen", "Directory of raw data for datagen.")
flags.DEFINE_string("output_dir", None, "Directory of checkpoints, summaries and hparams.json.")
flags.DEFINE_bool("generate_data", False, "Run datagen for --problem before training.")
flags.DEFINE_integer("train_steps", 250000, "Total number of training steps.")
flags.DEFINE_integer("eval_steps", 100, "Number of eval batches per evaluation (0 = all).")
flags.DEFINE_integer("local_eval_frequency", 1000, "Evaluate every this many steps.")
flags.DEFINE_integer(
    "save_checkpoints_steps", None,
    "Save a checkpoint every this many steps (default: local_eval_frequency, as t2t).")
flags.DEFINE_integer("keep_checkpoint_max", 20, "Number of recent checkpoints to keep.")
flags.DEFINE_integer("random_seed", None, "Seed for Python, NumPy and TensorFlow.")
flags.DEFINE_bool("eval_use_test_set", False, "Evaluate on the test split instead of dev.")
flags.DEFINE_integer("log_step_count_steps", 100, "Print a progress line every this many steps.")
flags.DEFINE_integer("worker_gpu", 1, "Number of GPUs (replicas) on this host.")
flags.DEFINE_integer(
    "worker_replicas", 1,
    "Number of worker hosts. TF_CONFIG starts and describes them; a value > 1 must match it.")
flags.DEFINE_integer(
    "worker_startup_timeout_secs", 300,
    "A worker waits this long for all workers of TF_CONFIG to start, logging whom it waits for "
    "every 30 s, then gives up with one line.")
flags.DEFINE_string(
    "warm_start_from", None,
    "t2t_lite or original t2t checkpoint (prefix or directory) to initialise the model from "
    "when output_dir has no checkpoint yet; every model variable must match.")
flags.DEFINE_bool(
    "warm_start_partial", False,
    "With --warm_start_from: load the model variables that match and keep the others' "
    "initial values (they are listed) instead of stopping.")
flags.DEFINE_bool("deterministic", False, "Enable TensorFlow op determinism (needs --random_seed).")
flags.DEFINE_bool(
    "xla_compile", False,
    "Compile the training step with XLA (jit_compile); training batches are padded to their "
    "length bucket's boundary so that it compiles once per bucket. In decode mode: compile "
    "the decoder (greedy or beam search), once per bucket of input shapes.")

# --- oneDNN or Eigen kernels, chosen before TensorFlow is imported (t2t_lite.utils.onednn) ---
flags.DEFINE_enum(
    "onednn", "auto", ["auto", "on", "off"],
    "TensorFlow's oneDNN kernels (TF_ENABLE_ONEDNN_OPTS). auto: TensorFlow's default, except on "
    "x86 CPUs where it leaves them off (no AVX512-VNNI/BF16, AVX-VNNI or AMX): there a short "
    "benchmark of the model's matmuls decides once per CPU, TensorFlow version and model width "
    "(cached in ~/.cache/t2t_lite/onednn.json). A TF_ENABLE_ONEDNN_OPTS of the environment wins.")

# --- t2t-datagen ----------------------------------------------------------------------------
flags.DEFINE_integer("max_cases", 0, "Maximum examples per split for datagen (0 = all).")

# --- t2t-datagen: selection and data sources (t2t_lite.data_generators.datagen) -------------
flags.DEFINE_string(
    "exclude_problems", "", "Comma-separated substrings; problems containing any are skipped.")
flags.DEFINE_bool("only_list", False, "Print the problems --problem selects, generate nothing.")
flags.DEFINE_integer("num_shards", 0, "t2t's legacy shard count; must stay 0 for problems.")
flags.DEFINE_string("train_src", None, "Translation datagen: training inputs file (UTF-8).")
flags.DEFINE_string("train_tgt", None, "Translation datagen: training targets, line-parallel.")
flags.DEFINE_string("dev_src", None, "Translation datagen: dev inputs file (.sgm allowed).")
flags.DEFINE_string("dev_tgt", None, "Translation datagen: dev targets, line-parallel.")
flags.DEFINE_integer(
    "approx_vocab_size", 0,
    "Datagen: subword vocab size instead of the problem's (0 = t2t's, e.g. 2**15); training "
    "then finds that vocab in --data_dir.")
flags.DEFINE_float(
    "subword_dropout", 0.0,
    "Datagen (not t2t's): MaxMatch-dropout rate for the training split's subword "
    "segmentation, e.g. 0.1; the split is written --subword_dropout_copies times, each pass "
    "segmented anew (subword regularization for small corpora). 0 = t2t's one pass.")
flags.DEFINE_integer(
    "subword_dropout_copies", 1,
    "Datagen: passes over the training corpus written with --subword_dropout, e.g. 10.")
flags.DEFINE_bool(
    "overwrite_data", False,
    "Datagen (not t2t's): remove the problem's data in --data_dir (every split and its vocab) "
    "and make it again. Needed when the data there was made from other inputs or settings "
    "(other files, --approx_vocab_size, ...), which datagen otherwise refuses.")
flags.DEFINE_string(
    "tfds_data_dir", None,
    "Where TFDS keeps WMT data when translation datagen falls back to it (default: TFDS's).")

# --- Translation datagen: SentencePiece vocabularies and a parent's vocabulary (not t2t's;
# t2t_lite.data_generators.vocab_sources) ----------------------------------------------------
flags.DEFINE_enum(
    "vocab_type", None, ["subwords", "sentencepiece"],
    "Datagen of translate_files and the WMT problems: t2t's subword vocab (the default) or a "
    "SentencePiece model, trained on the training split with --approx_vocab_size pieces "
    "unless --sentencepiece_model names one. Training, decoding and export find it in "
    "--data_dir.")
flags.DEFINE_string(
    "sentencepiece_model", None,
    "Datagen, --vocab_type=sentencepiece: an existing .model (inputs and targets, or the "
    "inputs' with --target_sentencepiece_model), copied into --data_dir.")
flags.DEFINE_string(
    "target_sentencepiece_model", None,
    "Datagen, --vocab_type=sentencepiece: the targets' existing .model (separate models).")
flags.DEFINE_enum(
    "sentencepiece_model_type", "unigram", ["unigram", "bpe"],
    "Datagen, --vocab_type=sentencepiece: the kind of model trained.")
flags.DEFINE_bool(
    "sentencepiece_separate", False,
    "Datagen, --vocab_type=sentencepiece: train one model per side (inputs, targets), each "
    "of --approx_vocab_size pieces, instead of one shared model.")
flags.DEFINE_string(
    "vocab_from", None,
    "Datagen of translate_files and the WMT problems: encode with a parent's vocabulary, a "
    "training run folder (the vocab files its run_inputs.json records) or one vocab / .model "
    "file, copied into --data_dir; then train with --warm_start_from=<that run>.")
# --- Datagen for big corpora (data_generators/parallel_datagen.py, corpus_filters.py) -------
flags.DEFINE_integer(
    "num_datagen_workers", None,
    "Datagen (not t2t's): processes encoding the training shards in parallel (translation "
    "problems); the shards are byte-identical for any number. Given (or any --filter_*): "
    "datagen_report.json is written in --data_dir. Unset: one process, t2t's outputs only.")
flags.DEFINE_integer(
    "filter_min_length", 0,
    "Datagen: drop training pairs with a side of fewer whitespace tokens (0 = off).")
flags.DEFINE_integer(
    "filter_max_length", 0,
    "Datagen: drop training pairs with a side of more whitespace tokens, e.g. 250 (0 = off; "
    "OpenNMT's src/tgt_seq_length, Moses clean-corpus-n's max).")
flags.DEFINE_float(
    "filter_length_ratio", 0.0,
    "Datagen: drop training pairs whose longer side has more than this many times the "
    "tokens of the shorter, e.g. 9 (Moses clean-corpus-n's -ratio; 0 = off).")
flags.DEFINE_bool(
    "filter_duplicates", False, "Datagen: drop repeated (source, target) training pairs.")
flags.DEFINE_bool(
    "filter_copies", False, "Datagen: drop training pairs whose target equals the source.")
flags.DEFINE_string(
    "filter_languages", "",
    "Datagen: source,target ISO 639-1 codes, e.g. en,de: drop training pairs with a side "
    "whose letters are mostly not in its language's Unicode script (no model needed).")

# --- WSJ parsing datagen (problems/wsj_parsing.py) ----------------------------------------
flags.DEFINE_string(
    "wsj_dir", None,
    "Penn Treebank folder holding wsj/SS/wsj_SSNN.mrg (LDC layout); default: --tmp_dir.")
flags.DEFINE_string(
    "wsj_train_sections", None,
    'Treebank sections for training, e.g. "02-21" (the default); 4-digit items name files '
    '(wsj_NNNN.mrg), e.g. "0001-0159".')
flags.DEFINE_string(
    "wsj_dev_sections", None,
    'Treebank sections for the dev split, e.g. "22" (the default); 4-digit items name files, '
    'e.g. "0160-0179".')

# --- t2t-decoder ----------------------------------------------------------------------------
flags.DEFINE_string("decode_hparams", "", 'Decoding hparams: "beam_size=4,alpha=0.6,...".')
flags.DEFINE_string("decode_from_file", None, "Decode the lines of this file.")
flags.DEFINE_string("decode_to_file", None, "Write decodes here.")
flags.DEFINE_string(
    "decode_prefix_file", None,
    "Target prefixes, one line per line of --decode_from_file (an empty line: none): each "
    "output starts with its prefix's subwords and the search continues from there.")
flags.DEFINE_string("decode_reference", None, "Reference translations, for BLEU after decoding.")
flags.DEFINE_bool("decode_interactive", False, "Decode lines typed on standard input.")
flags.DEFINE_integer(
    "decode_parallel_batches", 0,
    "--decode_from_file: batches decoded at the same time, one per thread (0: one per usable "
    "CPU core, at most 4, on CPU; 1 on GPU; always 1 when sampling, whose draws follow the "
    "batch order), each batch's ops on its share of the cores (the usable cores / the "
    "batches TensorFlow intra-op threads, unless TF_NUM_INTRAOP_THREADS is set). Same "
    "output; not a t2t flag.")
flags.DEFINE_string(
    "checkpoint_path", None,
    "Checkpoint to use (a prefix, or a folder's newest; default: latest in output_dir). "
    "Decode and SavedModel export: several, comma-separated, decode as an ensemble (the "
    "mean of their probabilities each step; same vocabulary; not t2t's).")
flags.DEFINE_string(
    "score_file", None,
    "Score given targets instead of decoding: each line 'input<TAB>target'; writes each "
    "line's mean per-token loss (un-smoothed, '%.6f') to --decode_to_file.")

# --- t2t-bleu -------------------------------------------------------------------------------
flags.DEFINE_string("translation", None, "File of translations (one per line).")
flags.DEFINE_string("reference", None, "File of references (one per line).")
flags.DEFINE_enum("bleu_variant", "both", ["both", "cased", "uncased"], "Which BLEU to report.")

# --- Model selection and MT metrics (not in t2t-bleu; sacreBLEU's metrics) -------------------
flags.DEFINE_string(
    "metrics", "bleu",
    "--mode=bleu, decode with --decode_reference and train_eval_and_decode: sacreBLEU metrics "
    "to report, comma-separated, of bleu,chrf,chrf++,ter (chrF2, chrF2++ and TER with their "
    "signatures; t2t's BLEU lines come with bleu).")
flags.DEFINE_integer(
    "paired_bootstrap", 0,
    "--mode=bleu with --translation=BASELINE,OTHER,...: sacreBLEU's paired bootstrap "
    "resampling with this many resamples (e.g. 1000): each system's score, mean, 95%% CI and "
    "p-value against the first (seed: SACREBLEU_SEED, default 12345).")
flags.DEFINE_integer(
    "eval_early_stopping_steps", None,
    "t2t-trainer's: train_and_eval stops when --eval_early_stopping_metric has not improved "
    "by --eval_early_stopping_metric_delta over this many steps (t2t's EarlyStoppingHook "
    "rule: against the last evaluation at least this many steps before the newest). The "
    "history is kept in output_dir/early_stopping.json.")
flags.DEFINE_string(
    "eval_early_stopping_metric", "loss",
    "t2t-trainer's: the metric early stopping watches: an eval metric (loss, "
    "metrics-<problem>/targets/accuracy or its last part) or, with "
    "--schedule=train_eval_and_decode, bleu / chrf / chrf++ / ter of the dev decodes.")
flags.DEFINE_float(
    "eval_early_stopping_metric_delta", 0.1,
    "t2t-trainer's: the least improvement that counts (t2t: improvements strictly below it "
    "are a plateau, so 0 never stops).")
flags.DEFINE_bool(
    "eval_early_stopping_metric_minimize", True,
    "t2t-trainer's: whether the early-stopping metric improves by going down (loss, ter) "
    "or up (--noeval_early_stopping_metric_minimize: accuracy, bleu, chrf).")
flags.DEFINE_integer(
    "keep_best_checkpoints", 0,
    "train_and_eval: keep the N best checkpoints by --best_checkpoint_metric in "
    "output_dir/best/ (with best_checkpoints.json: step -> value), never rotated by "
    "--keep_checkpoint_max. Decode, export and average read them with "
    "--checkpoint_path=$RUN/best. Not t2t's.")
flags.DEFINE_string(
    "best_checkpoint_metric", "loss",
    "--keep_best_checkpoints: the metric to rank by, named as for "
    "--eval_early_stopping_metric; lower is better for losses and ter, higher otherwise.")
flags.DEFINE_integer(
    "average_best", 0,
    "--mode=average: average the N best checkpoints of <output_dir>/best (written by "
    "--keep_best_checkpoints) instead of the last --n of output_dir.")

# --- t2t-avg-all / avg_checkpoints ----------------------------------------------------------
flags.DEFINE_integer("n", 8, "Number of last checkpoints to average.")
flags.DEFINE_string("avg_output_dir", None, "Where to write the averaged checkpoint.")

# --- t2t-exporter ---------------------------------------------------------------------------
flags.DEFINE_string(
    "export_dir", None,
    "Where --mode=export writes the SavedModel, as version folder <export_dir>/<unix time>/ "
    "(TensorFlow Serving's --model_base_path layout). Default: <output_dir>/export.")
flags.DEFINE_enum(
    "export_subword_segmenter", "core", ["core", "tensorflow_text"],
    "How the SavedModel's in-graph subword encoder splits escaped tokens: core TensorFlow ops "
    "(loads in any TensorFlow), or tensorflow-text's FastWordpieceTokenizer (same ids, about "
    "2x faster encoding; the serving process must load tensorflow-text's ops).")

# --- CTranslate2 export and decoding (t2t_lite.export.ct2; not in t2t) --------------------
flags.DEFINE_enum(
    "export_format", "saved_model", ["saved_model", "ctranslate2"],
    "--mode=export: a TensorFlow SavedModel, or a CTranslate2 model directory (written to "
    "--export_dir, default <output_dir>/ctranslate2).")
flags.DEFINE_enum(
    "quantization", "none",
    ["none", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
     "bfloat16", "float32"],
    "--export_format=ctranslate2: weight type of the saved model (none = float32).")
flags.DEFINE_integer(
    "ct2_max_position", 2048,
    "--export_format=ctranslate2: rows of the position tables, i.e. the longest input "
    "(EOS included) and the longest decode the exported model serves.")
flags.DEFINE_enum(
    "decode_engine", "t2t_lite", ["t2t_lite", "ctranslate2"],
    "--mode=decode: t2t_lite's TensorFlow decoder, or CTranslate2 on the directory written by "
    "--export_format=ctranslate2 (--export_dir, default <output_dir>/ctranslate2).")
flags.DEFINE_string(
    "ct2_device", "cpu", "--decode_engine=ctranslate2: 'cpu', 'cuda' or 'auto'.")
flags.DEFINE_string(
    "ct2_compute_type", "default",
    "--decode_engine=ctranslate2: CTranslate2 compute type (default = the saved weights' "
    "type; int8, int8_float32, float16, bfloat16, float32, ...).")
flags.DEFINE_integer(
    "ct2_intra_threads", 0, "--decode_engine=ctranslate2: threads per batch (0: 1 on CPU, "
    "CTranslate2's default on GPU).")
flags.DEFINE_integer(
    "ct2_inter_threads", 0, "--decode_engine=ctranslate2: batches decoded in parallel (0: on "
    "CPU the usable cores / ct2_intra_threads, on GPU 1).")
flags.DEFINE_float(
    "ct2_patience", 1.0,
    "--decode_engine=ctranslate2: beam search ends after beam_size * patience finished "
    "hypotheses (CTranslate2's patience).")
flags.DEFINE_float(
    "ct2_length_penalty", None,
    "--decode_engine=ctranslate2: CTranslate2's length-penalty exponent during the beam search "
    "(default: alpha); the hypotheses are re-ranked with t2t's GNMT penalty either way.")

# --- Attention pictures (--mode=attention; t2t's attention visualisation notebook) ---------
flags.DEFINE_string(
    "attention_dir", None,
    "--mode=attention: where the PNGs and .npz go (default <output_dir>/attention).")
flags.DEFINE_integer(
    "attention_max_lines", 5, "--mode=attention: pictures of the first N lines of "
    "--decode_from_file.")

# --- Translation server and its client (--mode=serve / --mode=query; t2t's Insights server
# and t2t-query-server; t2t_lite.serving.server) ----------------------------------------------
# The limits' defaults are ServerConfig's (one source; the fields' flags: config.FLAGS).
_SERVE = ServerConfig()
flags.DEFINE_string("host", "127.0.0.1", "--mode=serve: the address to listen on.")
flags.DEFINE_integer("port", 8080, "--mode=serve: the port (0: a free one, printed).")
flags.DEFINE_string(
    "saved_model_dir", None,
    "--mode=serve: serve this SavedModel (a version folder written by --mode=export, or the "
    "export dir: its newest version) instead of a run; --decode_hparams must state its "
    "export's beam_size, alpha, extra_length and return_beams.")
flags.DEFINE_integer("max_batch_size", _SERVE.max_batch_size,
                     "--mode=serve: sentences decoded together at most.")
flags.DEFINE_integer(
    "max_batch_tokens", _SERVE.max_batch_tokens,
    "--mode=serve: sentences x padded input length (subwords) per batch at most (0: none).")
flags.DEFINE_float(
    "batch_timeout_ms", _SERVE.batch_timeout_ms,
    "--mode=serve: how long a sentence waits for its batch to fill (ms; default: the "
    "engine's, 5 for a t2t_lite model or a SavedModel, 1 for CTranslate2).")
flags.DEFINE_float(
    "request_timeout_secs", _SERVE.request_timeout_secs,
    "--mode=serve: a request not answered by then gets 504.")
flags.DEFINE_integer(
    "serve_max_queue", _SERVE.max_queue_sentences,
    "--mode=serve: sentences waiting at most; a request that does not fit gets 503.")
flags.DEFINE_integer("serve_max_sentences", _SERVE.max_sentences,
                     "--mode=serve: sentences per request at most.")
flags.DEFINE_integer(
    "serve_max_input_tokens", _SERVE.max_input_tokens,
    "--mode=serve: subwords per sentence (EOS included) at most; longer ones get 413.")
flags.DEFINE_integer("serve_max_beam_size", _SERVE.max_beam_size,
                     "--mode=serve: the largest beam_size a request may ask for.")
flags.DEFINE_integer("serve_max_n_best", _SERVE.max_n_best,
                     "--mode=serve: the most hypotheses a request may ask for.")
flags.DEFINE_integer(
    "serve_decode_workers", _SERVE.decode_workers,
    "--mode=serve: batches decoded at the same time, one thread each (0: one per usable CPU "
    "core with a t2t_lite model, as --decode_parallel_batches; 1 for an export).")
flags.DEFINE_integer(
    "serve_intra_op_threads", _SERVE.intra_op_threads,
    "--mode=serve: threads of one decode's ops (TensorFlow's intra-op threads; a t2t_lite "
    "model or a SavedModel). 0: TF_NUM_INTRAOP_THREADS where set, else the usable CPU cores / "
    "the decode workers, at least 1 (each worker its share of the cores; GET /v1/models says "
    "the number in use).")
flags.DEFINE_integer(
    "serve_steps_per_call", _SERVE.steps_per_call,
    "--mode=serve with --serve_batching=continuous: decode steps between two chances for "
    "waiting sentences to join the running search (fewer when every sentence ended).")
flags.DEFINE_integer(
    "serve_max_body_bytes", _SERVE.max_body_bytes,
    "--mode=serve: bytes of a request body at most (by Content-Length, and while reading: "
    "never more is read); larger ones get 413.")
flags.DEFINE_float(
    "serve_read_timeout_secs", _SERVE.read_timeout_secs,
    "--mode=serve: a request body not received whole within this many seconds gets 408.")
flags.DEFINE_integer(
    "serve_max_attention_cells", _SERVE.max_attention_cells,
    "--mode=serve: attention weights (layers x heads x output x input positions, summed over "
    "a request's sentences) that return_attention may answer with at most; beyond: 413.")
flags.DEFINE_integer(
    "serve_max_compiled_decoders", _SERVE.max_compiled_decoders,
    "--mode=serve: compiled decoders (one per beam size and n-best > 1 that requests use) "
    "kept at most; the least recently used one is dropped beyond.")
flags.DEFINE_enum(
    "serve_batching", _SERVE.batching, ["batch", "continuous"],
    "--mode=serve: continuous: sentences join and leave a running search between decode "
    "steps (a single t2t_lite model decoded by beam search or argmax; other engines and "
    "options batch per batch); batch: each batch is decoded to its end before the next.")
flags.DEFINE_string(
    "server_url", "http://127.0.0.1:8080",
    "--mode=query: the translation server (--mode=serve) to send --decode_from_file (or "
    "standard input) to, line by line; translations go to --decode_to_file or stdout.")

# Flags that hold paths (checkpoint_path: a "," list): `~` is expanded in each before a mode
# runs, so that every mode reads `--output_dir=~/run` alike.
PATH_FLAGS = ("data_dir", "tmp_dir", "output_dir", "warm_start_from", "train_src", "train_tgt",
              "dev_src", "dev_tgt", "tfds_data_dir", "wsj_dir", "decode_from_file",
              "decode_to_file", "decode_reference", "translation", "reference",
              "avg_output_dir", "checkpoint_path", "score_file", "export_dir", "attention_dir")


def expand_user_paths(flags_obj: Any) -> None:
    """Expands `~` in every path flag of `flags_obj` (`PATH_FLAGS`, through
    `file_io.user_path`); flags it lacks or that are unset are left alone."""
    for name in PATH_FLAGS:
        value = getattr(flags_obj, name, None)
        if value:
            parts = value.split(",") if name == "checkpoint_path" else [value]
            setattr(flags_obj, name, ",".join(file_io.user_path(p.strip()) for p in parts))
