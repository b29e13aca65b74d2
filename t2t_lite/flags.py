"""Command-line flags of run.py, under tensor2tensor's names (t2t-trainer, t2t-datagen,
t2t-decoder, t2t-bleu, t2t-avg-all, t2t-exporter).

Importing this module defines the flags on absl's global FLAGS once. Each section lists the
t2t tool the flags come from; defaults are t2t's unless the comment says why not.
"""
from absl import flags

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
    "batch order). "
    "Same output; not a t2t flag.")
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

# --- CTranslate2 export and decoding (t2t_lite.serving.ct2; not in t2t) --------------------
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
