"""HParams typing and override parsing, and every hparams set against T2T_REFERENCE.md §1."""
import json

import pytest

from t2t_lite import hparams_support, registry
from t2t_lite.hparams import HParams, HParamsError
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.hparams_sets.transformer import basic_params1

CWRH = "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"

# Reference table §1.1: d, f, h, N, pp, att, relu, pre, post, beta2, schedule,
# lr constant, learning_rate, warmup, batch, max_length, share.
TABLE = {
    "transformer_base_v1": (512, 2048, 8, 6, 0.1, 0.0, 0.0, "none", "dan", 0.98, "legacy", 1.0, 0.1, 4000, 4096, 256, True),
    "transformer_base_v2": (512, 2048, 8, 6, 0.1, 0.1, 0.1, "n", "da", 0.98, "legacy", 1.0, 0.2, 8000, 4096, 256, True),
    "transformer_base_v3": (512, 2048, 8, 6, 0.1, 0.1, 0.1, "n", "da", 0.997, CWRH, 2.0, 0.2, 8000, 4096, 256, True),
    "transformer_base": (512, 2048, 8, 6, 0.1, 0.1, 0.1, "n", "da", 0.997, CWRH, 2.0, 0.2, 8000, 4096, 256, True),
    "transformer_big": (1024, 4096, 16, 6, 0.3, 0.1, 0.1, "n", "da", 0.997, CWRH, 2.0, 0.2, 8000, 2048, 256, True),
    "transformer_big_single_gpu": (1024, 4096, 16, 6, 0.1, 0.1, 0.1, "n", "da", 0.997, CWRH, 2.0, 0.2, 16000, 2048, 256, True),
    "transformer_base_single_gpu": (512, 2048, 8, 6, 0.1, 0.1, 0.1, "n", "da", 0.997, "constant*linear_warmup*rsqrt_decay", 0.1, 0.2, 16000, 1024, 256, True),
    "transformer_tiny": (128, 512, 4, 2, 0.1, 0.1, 0.1, "n", "da", 0.997, CWRH, 2.0, 0.2, 8000, 4096, 256, True),
    "transformer_small": (256, 1024, 4, 2, 0.1, 0.1, 0.1, "n", "da", 0.997, CWRH, 2.0, 0.2, 8000, 4096, 256, True),
    "transformer_parsing_base": (1024, 2048, 8, 6, 0.2, 0.2, 0.1, "n", "da", 0.997, CWRH, 2.0, 0.05, 16000, 4096, 512, False),
    "transformer_parsing_big": (1024, 4096, 16, 6, 0.1, 0.1, 0.1, "n", "da", 0.997, CWRH, 2.0, 0.05, 4000, 2048, 512, True),
    "transformer_big_enfr": (1024, 8192, 16, 6, 0.1, 0.1, 0.1, "n", "da", 0.997, CWRH, 2.0, 0.2, 8000, 4096, 256, False),
}
FIELDS = (
    "hidden_size", "filter_size", "num_heads", "num_hidden_layers",
    "layer_prepostprocess_dropout", "attention_dropout", "relu_dropout",
    "layer_preprocess_sequence", "layer_postprocess_sequence", "optimizer_adam_beta2",
    "learning_rate_schedule", "learning_rate_constant", "learning_rate",
    "learning_rate_warmup_steps", "batch_size", "max_length",
    "shared_embedding_and_softmax_weights",
)
# Values common to every transformer_* set (reference §1.1, "Common to every ...").
COMMON = {
    "norm_type": "layer", "norm_epsilon": 1e-6, "initializer": "uniform_unit_scaling",
    "initializer_gain": 1.0, "optimizer_adam_beta1": 0.9, "optimizer_adam_epsilon": 1e-9,
    "label_smoothing": 0.1, "clip_grad_norm": 0.0, "weight_decay": 0.0, "symbol_modality_num_shards": 16,
    "num_encoder_layers": 0, "num_decoder_layers": 0, "attention_key_channels": 0,
    "attention_value_channels": 0, "ffn_layer": "dense_relu_dense", "pos": "timing",
    "self_attention_type": "dot_product", "multiply_embedding_mode": "sqrt_depth",
    "shared_embedding": False, "attention_dropout_broadcast_dims": "",
    "relu_dropout_broadcast_dims": "", "layer_prepostprocess_dropout_broadcast_dims": "",
    "use_pad_remover": True, "use_target_space_embedding": True, "causal_decoder_self_attention": True,
    "proximity_bias": False, "max_relative_position": 0, "learning_rate_decay_scheme": "noam",
    "min_length": 0, "min_length_bucket": 8, "length_bucket_step": 1.1, "batch_shuffle_size": 512,
    "use_fixed_batch_size": False, "eval_drop_long_sequences": False, "eval_run_autoregressive": False,
    "sampling_method": "argmax", "sampling_temp": 1.0, "sampling_keep_top_k": -1, "symbol_dropout": 0.0,
    "vocab_divisor": 1, "max_input_seq_length": 0, "max_target_seq_length": 0, "factored_logits": False,
    "activation_dtype": "float32", "weight_dtype": "float32", "grad_noise_scale": 0.0, "weight_noise": 0.0,
    "prepend_mode": "none", "pack_dataset": False, "split_to_length": 0,
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_set_matches_reference_table(name):
    hp = create_hparams(name)
    assert tuple(getattr(hp, f) for f in FIELDS) == TABLE[name]
    for field, value in COMMON.items():
        assert getattr(hp, field) == value, field


def test_multistep8_and_all_sets_registered():
    hp = create_hparams("transformer_base_multistep8")
    assert hp.optimizer == "multistep_adam"
    assert hp.optimizer_multistep_accumulate_steps == 8
    # The relative sets are checked against their parents in test_relative_attention.py.
    relative = {"transformer_relative", "transformer_relative_tiny", "transformer_relative_big"}
    assert set(TABLE) | {"transformer_base_multistep8"} | relative == set(
        registry.list_hparams())


def test_basic_params1_row():
    hp = basic_params1()
    assert (hp.hidden_size, hp.num_hidden_layers, hp.layer_prepostprocess_dropout) == (64, 4, 0.1)
    assert (hp.layer_preprocess_sequence, hp.layer_postprocess_sequence) == ("none", "dan")
    assert (hp.optimizer_adam_beta1, hp.optimizer_adam_beta2, hp.optimizer_adam_epsilon) == (0.85, 0.997, 1e-6)
    assert (hp.learning_rate_schedule, hp.learning_rate_decay_scheme) == ("legacy", "none")
    assert (hp.learning_rate_constant, hp.learning_rate, hp.learning_rate_warmup_steps) == (1.0, 0.1, 100)
    assert (hp.batch_size, hp.max_length, hp.shared_embedding_and_softmax_weights) == (4096, 0, False)
    assert (hp.initializer, hp.initializer_gain, hp.clip_grad_norm) == ("orthogonal", 1.5, 2.0)
    assert (hp.weight_decay, hp.symbol_modality_num_shards) == (1e-6, 1)
    assert "filter_size" not in hp


def test_tiny_equals_t2t_fixture_hparams(t2t_fixtures):
    fixture = json.loads((t2t_fixtures / "model_A.json").read_text())["model_hparams"]
    # Modality function dicts ({}) are code, not hparams.
    fixture = {k: v for k, v in fixture.items() if v != {}}
    ours = create_hparams("transformer_tiny").values()
    # t2t_lite's own hparams (use_fused_kernels) join every set; t2t has none of them.
    assert set(hparams_support.OWN) <= set(ours)
    ours = {k: v for k, v in ours.items() if k not in hparams_support.OWN}
    assert ours == fixture
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in fixture.items()}


def test_traps_are_dead_attributes():
    v1 = create_hparams("transformer_base_v1")
    assert v1.num_sampled_classes == 0 and "num_sampled_classes" not in v1.values()
    big = create_hparams("transformer_parsing_big")
    assert "shared_source_target_embedding" not in big.values()


def test_types_fixed_when_added():
    hp = create_hparams("transformer_base")
    # clip_grad_norm was added as 2.0 (float) and stays float after "= 0." / int overrides.
    hp.parse("clip_grad_norm=1")
    assert hp.clip_grad_norm == 1.0 and isinstance(hp.clip_grad_norm, float)


def test_parse_overrides():
    hp = create_hparams(
        "transformer_tiny",
        "hidden_size=64, num_heads=2,layer_prepostprocess_dropout=0.3,"
        "shared_embedding_and_softmax_weights=false,layer_preprocess_sequence=none,"
        "use_pad_remover=0,optimizer=adam_x",
    )
    assert (hp.hidden_size, hp.num_heads, hp.layer_prepostprocess_dropout) == (64, 2, 0.3)
    assert hp.shared_embedding_and_softmax_weights is False
    assert hp.use_pad_remover is False
    assert (hp.layer_preprocess_sequence, hp.optimizer) == ("none", "adam_x")
    hp.parse("initializer_gain=2")
    assert hp.initializer_gain == 2.0 and isinstance(hp.initializer_gain, float)
    hp.parse("summarize_vars=True,sampling_temp=1e-3")
    assert hp.summarize_vars is True and hp.sampling_temp == 0.001


def test_parse_list_values():
    hp = HParams(sizes=[1, 2], rates=[0.5], name="x")
    hp.parse("sizes=[3,4,5],rates=[1, 0.25]")
    assert hp.sizes == [3, 4, 5] and hp.rates == [1.0, 0.25]
    hp.parse("sizes=[]")
    assert hp.sizes == []


BAD_OVERRIDES = [
    ("hiden_size=3", "Unknown hparam 'hiden_size'; did you mean hidden_size"),
    ("hidden_size=2048.0", "hidden_size': value '2048.0' is not an int"),
    ("hidden_size=1e3", "hidden_size': value '1e3' is not an int"),
    ("hidden_size=abc", "hidden_size"),
    ("layer_prepostprocess_dropout=high", "layer_prepostprocess_dropout"),
    ("use_pad_remover=maybe", "use_pad_remover': value 'maybe' is not a bool"),
    ("hidden_size=1,hidden_size=2", "'hidden_size' is set more than once"),
    ("hidden_size", "Malformed hparams override at 'hidden_size'"),
    ("=3", "Malformed hparams override"),
    ("hidden_size=[1,2]", "'hidden_size' expects an int, got a list"),
    ("learning_rate_minimum=fast", "'learning_rate_minimum': value 'fast' is not a float"),
    ("hidden_size=", "'hidden_size' expects an int, got an empty value"),
    ("num_heads=4;hidden_size=3", "num_heads"),
    ("1abc=2", "Malformed hparams override"),
    ("hidden_size[0]=3", "indexed assignment"),
]


@pytest.mark.parametrize("override,message", BAD_OVERRIDES)
def test_bad_override_gives_one_clear_line(override, message):
    hp = create_hparams("transformer_tiny")
    before = hp.values()
    with pytest.raises(HParamsError) as info:
        hp.parse(override)
    text = str(info.value)
    assert message in text
    assert "\n" not in text
    assert hp.values() == before  # nothing applied from a bad string


def test_a_none_default_can_be_set_only_with_a_declared_type():
    hp = HParams(floor=None, other=None)
    with pytest.raises(HParamsError, match="'floor' has default None and cannot be set"):
        hp.parse("floor=0.1")
    hp.declare_type("floor", float)
    assert hp.parse("floor=1").floor == 1.0
    assert hp.copy().parse("floor=0.5").floor == 0.5
    with pytest.raises(HParamsError, match="'other' has default None and cannot be set"):
        hp.other = 2
    # t2t's learning_rate_minimum (None) is typed so that --hparams and hparams.json set it.
    tiny = create_hparams("transformer_tiny", "learning_rate_minimum=1e-5")
    assert tiny.learning_rate_minimum == 1e-5
    assert create_hparams("transformer_tiny").parse_json(tiny.to_json()) == tiny


def test_set_type_checks():
    hp = create_hparams("transformer_tiny")
    with pytest.raises(HParamsError, match="'hidden_size' expects an int"):
        hp.hidden_size = 3.5
    with pytest.raises(HParamsError, match="'use_pad_remover' expects a bool"):
        hp.use_pad_remover = 1
    with pytest.raises(HParamsError, match="'optimizer' expects a str"):
        hp.optimizer = 3
    with pytest.raises(HParamsError, match="'label_smoothing' expects a float"):
        hp.label_smoothing = "0.1"


def test_json_round_trip():
    hp = create_hparams("transformer_big", "hidden_size=32")
    text = hp.to_json()
    assert json.loads(text) == hp.values()
    again = create_hparams("transformer_base").parse_json(text)
    assert again == hp
    rebuilt = HParams.from_json(text)
    assert rebuilt.values() == hp.values()


def test_create_hparams_applies_hparams_json_before_overrides(tmp_path):
    path = tmp_path / "hparams.json"
    path.write_text(json.dumps({"hidden_size": 96, "num_heads": 3}))
    hp = create_hparams("transformer_tiny", "num_heads=2", hparams_json_path=str(path))
    assert (hp.hidden_size, hp.num_heads) == (96, 2)


def test_unknown_set_lists_close_names():
    with pytest.raises(registry.RegistryError) as info:
        create_hparams("transformer_bse")
    assert "Did you mean: transformer_base" in str(info.value)
