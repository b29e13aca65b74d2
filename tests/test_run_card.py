"""The run card (t2t_lite.training.run_card): sections written by training, eval and decode."""
import json
import sys

import pytest
import tensorflow as tf

from t2t_lite.training import dev_decode, run_card, trainer_lib
from tests.trainer_utils import ReverseProblem, model_fn, tiny_hparams


def test_sections_merge_and_markdown_shows_them(tmp_path):
    run_card.update(str(tmp_path), "eval", {"step": 6, "loss": 1.25})
    run_card.update(str(tmp_path), "training", {"global step": 6})
    card = run_card.update(str(tmp_path), "eval", {"step": 12, "loss": 0.5})
    assert json.loads((tmp_path / "run_card.json").read_text()) == card
    assert card["training"]["global step"] == 6  # untouched by the eval update
    assert card["eval"]["step"] == 12 and card["eval"]["loss"] == 0.5
    md = (tmp_path / "run_card.md").read_text()
    assert md.index("## Training") < md.index("## Dev metrics")
    assert "| loss | 0.5 |" in md and "| step | 12 |" in md and "1.25" not in md
    with pytest.raises(ValueError, match="section"):
        run_card.update(str(tmp_path), "nonsense", {})


def test_global_batch_counts_replicas_and_accumulation():
    batch = run_card.global_batch(1024, replicas=4, accumulate_steps=2, means_tokens=True)
    assert batch["global batch per update"] == "8192 tokens"
    assert batch["batch_size per replica"] == "1024 tokens"
    assert run_card.global_batch(32, 1, 1, False)["global batch per update"] == "32 sequences"


def test_command_line_is_shell_quoted():
    assert run_card.command_line(["/x/run.py", "--hparams=a=1,b='c d'"]) == \
        "python run.py '--hparams=a=1,b='\"'\"'c d'\"'\"''"


def test_setup_records_versions_problem_and_overrides(tmp_path):
    hp = tiny_hparams(batch_size=256)
    problem = ReverseProblem()
    run_card.record_setup(str(tmp_path), problem, "transformer", "transformer_tiny",
                          "batch_size=256", hp, replicas=1, training=True)
    setup = run_card.read(str(tmp_path))["setup"]
    assert setup["tensorflow"] == tf.__version__
    assert setup["python"] == ".".join(map(str, sys.version_info[:3]))
    assert setup["problem"] == "reverse_standin" and setup["hparams set"] == "transformer_tiny"
    assert setup["hparams overrides"] == "batch_size=256"
    assert setup["global batch per update"] == "256 tokens"
    fixed = setup["model hparams (a resume may not change them)"]
    assert f"hidden_size={hp.hidden_size}, " in fixed and f"num_heads={hp.num_heads}, " in fixed
    assert "batch_size" not in fixed and "learning_rate" not in fixed
    # An eval run keeps the training run's setup.
    run_card.record_setup(str(tmp_path), problem, "transformer", "other", "", hp, 1,
                          training=False)
    assert run_card.read(str(tmp_path))["setup"]["hparams set"] == "transformer_tiny"


def test_a_changed_number_of_replicas_states_the_new_global_batch(tmp_path):
    hp = tiny_hparams(batch_size=256)
    problem = ReverseProblem()
    assert run_card.replicas_change(str(tmp_path), problem, hp, 2) is None  # no card yet
    run_card.record_setup(str(tmp_path), problem, "transformer", "transformer_tiny", "", hp,
                          replicas=2, training=True)
    assert run_card.replicas_change(str(tmp_path), problem, hp, 2) is None
    assert run_card.replicas_change(str(tmp_path), problem, hp, 1) == (
        "replicas 2 -> 1 (global batch per update 512 tokens -> 256 tokens)")
    run_card.record_setup(str(tmp_path), problem, "transformer", "transformer_tiny", "", hp,
                          replicas=1, training=True)
    assert run_card.replicas_change(str(tmp_path), problem, hp, 2) == (
        "replicas 1 -> 2 (global batch per update 256 tokens -> 512 tokens)")


@pytest.mark.slow
def test_training_and_eval_fill_the_card(tmp_path):
    hp = tiny_hparams()
    tf.keras.utils.set_random_seed(1)
    config = trainer_lib.RunConfig(output_dir=str(tmp_path), train_steps=8,
                                   log_step_count_steps=4, local_eval_frequency=8,
                                   eval_steps=1, random_seed=1, num_decode_examples=0)
    trainer = trainer_lib.Trainer(model_fn(hp), hp, ReverseProblem(), "", config)
    last = trainer.train(eval_every=8)
    card = run_card.read(str(tmp_path))
    assert card["training"]["global step"] == 8 and card["training"]["steps this session"] == 8
    assert card["training"]["tokens/s (last progress interval)"] == round(last["tokens/sec"])
    assert card["training"]["training loss (last progress interval)"] == pytest.approx(
        last["loss"])
    assert card["eval"]["step"] == 8
    assert card["eval"]["loss"] == pytest.approx(trainer.last_eval_results["loss"])
    assert "## Dev metrics" in (tmp_path / "run_card.md").read_text()


def test_decode_bleu_lands_in_the_card(tmp_path):
    reference = tmp_path / "ref.txt"
    decodes = tmp_path / "dec.txt"
    reference.write_text("the cat sat on the mat\nhello world again today\n")
    decodes.write_text("the cat sat on the mat\nhello world again today\n")
    dev_decode.report_bleu(str(reference), str(decodes), str(tmp_path),
                           str(tmp_path / "ckpt-7"))
    bleu = run_card.read(str(tmp_path))["bleu"]
    assert bleu["checkpoint step"] == 7
    assert bleu["sacreBLEU"].startswith("BLEU|") and "100.00" in bleu["sacreBLEU"]
    assert "tok:13a" in bleu["sacreBLEU"]  # the signature
    assert bleu["t2t BLEU_uncased"] == "100.00" and bleu["t2t BLEU_cased"] == "100.00"
