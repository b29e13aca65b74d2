"""bench/bench_dropout_mask.py: the masks it times are those a training step of the model
draws (recorded from the model itself), and its Philox comparison keeps units at the rate."""
import sys

import numpy as np
import tensorflow as tf

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import bench_dropout_mask
import bench_training

from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.transformer import Transformer


def test_recorded_mask_shapes_are_every_dropout_of_a_tiny_training_step():
    hp = create_hparams("transformer_tiny")
    model = Transformer(hp, 64, 64)
    batch = bench_training.synthetic_batch(96, 12, 64, np.random.default_rng(0))  # 8 x 12
    shapes = bench_dropout_mask.step_mask_shapes(model, batch, hp.label_smoothing)
    n, d, f, h = hp.num_hidden_layers, hp.hidden_size, hp.filter_size, hp.num_heads
    # Residual dropouts: 2 per encoder layer, 3 per decoder layer, and the two input
    # dropouts; the FFN's relu dropout per layer; attention weights: 1 + 2 per layer.
    expected = ([(8, 12, d)] * (2 * n + 3 * n + 2) + [(8, 12, f)] * (2 * n)
                + [(8, h, 12, 12)] * (3 * n))
    assert sorted(s for s, _ in shapes) == sorted(expected)
    assert {rate for _, rate in shapes} == {hp.layer_prepostprocess_dropout}  # all 0.1


def test_the_philox_comparison_and_the_hashed_mask_drop_at_the_rate():
    shapes = [((64, 33, 128), 0.1), ((64, 4, 33, 33), 0.3)]
    units = sum(int(np.prod(s)) for s, _ in shapes)
    expected = sum(int(np.prod(s)) * (1 - r) for s, r in shapes)
    seed = tf.constant([3, 5], tf.int64)
    for variant in bench_dropout_mask.VARIANTS.values():
        kept = int(bench_dropout_mask.masks_function(variant, shapes, count=True)(seed))
        assert abs(kept - expected) < 5 * np.sqrt(units * 0.3 * 0.7), variant
