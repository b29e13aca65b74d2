"""translate_bench_files: t2t's own TranslateProblem over the bench's parallel files.

The files are `train.en`/`train.de`/`dev.en`/`dev.de` in --tmp_dir (bench_datagen.py links
them there, with the empty file `bench_corpus` that t2t's vocab sampler takes for the
already downloaded archive). Everything else is t2t's TranslateProblem: compile_data copies
the pairs into `<tmp_dir>/translate_bench_files-compiled-*`, the shared subword vocab
(approx 2**13, as the t2t_lite side's --approx_vocab_size=8192) is built from ~1 MB of lines
of each training file, 100 train shards, 1 dev shard, then the shuffle.

Timing only: `PHASE <name> <start> <end>` lines on stderr (unix times) around t2t's
compile_data (per split), vocab (get_or_create_vocab) and shuffle_dataset calls; t2t's code
runs unchanged in between.
"""
import sys
import time

from tensor2tensor.data_generators import generator_utils, problem, translate
from tensor2tensor.utils import registry


def _phase(name, start):
    sys.stderr.write(f"PHASE {name} {start:.3f} {time.time():.3f}\n")
    sys.stderr.flush()


_shuffle_dataset = generator_utils.shuffle_dataset


def _timed_shuffle(*args, **kwargs):
    start = time.time()
    result = _shuffle_dataset(*args, **kwargs)
    _phase("shuffle", start)
    return result


generator_utils.shuffle_dataset = _timed_shuffle


@registry.register_problem
class TranslateBenchFiles(translate.TranslateProblem):
    """En->De bench corpus, approx_vocab_size 2**13."""

    @property
    def approx_vocab_size(self):
        return 2**13

    def source_data_files(self, dataset_split):
        train = dataset_split == problem.DatasetSplit.TRAIN
        return [["bench_corpus", ("train.en", "train.de") if train else ("dev.en", "dev.de")]]

    def generate_samples(self, data_dir, tmp_dir, dataset_split, **kwargs):
        start = time.time()
        samples = super().generate_samples(
            data_dir, tmp_dir, dataset_split, **kwargs)
        _phase("compile_" + dataset_split, start)
        return samples

    def get_or_create_vocab(self, data_dir, tmp_dir, force_get=False):
        start = time.time()
        vocab = super().get_or_create_vocab(data_dir, tmp_dir,
                                                                     force_get)
        _phase("vocab", start)
        return vocab
