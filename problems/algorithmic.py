"""t2t's algorithmic problems: symbol sequences generated from a random seed, no download.

Symbols 0..num_symbols-1 are stored as ids shifted by the 2 reserved ids (0 = pad,
1 = EOS), each sequence followed by EOS, exactly as t2t does. Data sets are generated with
NumPy's global generator, drawing the same numbers in the same order as t2t, so
`datagen --random_seed=429459` writes t2t's very examples. Train: 100,000 examples of length
1..train_length in 10 shards; dev: 10,000 examples of length 1..dev_length (t2t: 400, ten
times the train length, to test length generalization) in 1 shard; written shuffled.

The `*_small` variants (not in t2t) keep the train data but draw the dev set from the train
distribution (dev_length = train_length) and make it 1,000 examples, so an in-training eval
is quick and per-sequence accuracy can reach 100%: these are the embedded default's
problems. `algorithmic_reverse_binary40_test` is t2t's tiny test problem.

Difference from t2t: the addition and multiplication inputs separate their two numbers with
the symbol `base`, one past t2t's vocab (`num_symbols + 2`); their vocab here is
`num_symbols + 3` so that the separator is a valid id. The data are t2t's.
"""
from __future__ import annotations

import numpy as np

from t2t_lite.data_generators import generator_utils, problem, text_encoder
from t2t_lite.registry import register_problem


class AlgorithmicProblem(problem.Problem):
    """Base of the algorithmic problems (t2t's `AlgorithmicProblem`)."""

    @property
    def num_symbols(self) -> int:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        """Ids per side: the symbols plus the 2 reserved ids."""
        return self.num_symbols + text_encoder.NUM_RESERVED_TOKENS

    def generator(self, nbr_symbols: int, max_length: int, nbr_cases: int):
        """Yields `{"inputs": [int], "targets": [int]}` with unshifted symbols."""
        raise NotImplementedError

    @property
    def train_length(self) -> int:
        return 40

    @property
    def dev_length(self) -> int:
        return 400

    @property
    def train_size(self) -> int:
        return 100000

    @property
    def dev_size(self) -> int:
        return 10000

    @property
    def num_shards(self) -> int:
        return 10

    def generate_data(
        self, data_dir: str, tmp_dir: str, task_id: int = -1, max_cases: int | None = None
    ) -> None:
        """Writes `num_shards` train shards and 1 dev shard (no shuffle step, as t2t).

        Args:
          data_dir: output directory (created if needed).
          tmp_dir: unused (nothing to download).
          task_id: unused.
          max_cases: caps both sizes (for quick runs); None/0: t2t's sizes.
        """
        import os

        del tmp_dir, task_id
        os.makedirs(data_dir, exist_ok=True)
        train_size, dev_size = self.train_size, self.dev_size
        if max_cases:
            train_size, dev_size = min(train_size, max_cases), min(dev_size, max_cases)
        generator_utils.generate_dataset_and_shuffle(
            self._generator_eos(self.train_length, train_size),
            self.training_filepaths(data_dir, self.num_shards, shuffled=True),
            self._generator_eos(self.dev_length, dev_size),
            self.dev_filepaths(data_dir, 1, shuffled=True),
            shuffle=False,
        )

    def _generator_eos(self, max_length: int, nbr_cases: int):
        """Shifts symbols by the reserved ids and appends EOS."""
        shift = text_encoder.NUM_RESERVED_TOKENS
        for case in self.generator(self.num_symbols, max_length, nbr_cases):
            yield {
                name: [int(i) + shift for i in values] + [text_encoder.EOS_ID]
                for name, values in case.items()
            }

    def hparams(self, defaults, model_hparams) -> None:
        p = defaults
        p.modality = {"inputs": problem.ModalityType.SYMBOL, "targets": problem.ModalityType.SYMBOL}
        p.vocab_size = {"inputs": self.vocab_size, "targets": self.vocab_size}
        p.input_space_id = problem.SpaceID.DIGIT_0
        p.target_space_id = problem.SpaceID.DIGIT_1


class _SmallDev:
    """Mixin: dev set drawn like the train set (dev_length = train_length), 1,000 examples."""

    @property
    def dev_length(self) -> int:
        return self.train_length

    @property
    def dev_size(self) -> int:
        return 1000


def _random_symbols(nbr_symbols: int, count: int) -> list[int]:
    """`count` uniform symbols in [0, nbr_symbols).

    One array draw consumes NumPy's legacy generator exactly like t2t's `count` scalar
    `np.random.randint(nbr_symbols)` calls (same values, same order), several times faster.
    """
    return np.random.randint(nbr_symbols, size=count).tolist()


def _random_sequence(nbr_symbols: int, max_length: int) -> list[int]:
    """A length uniform in [1, max_length], then uniform symbols (t2t's draw order)."""
    length = np.random.randint(max_length) + 1
    return _random_symbols(nbr_symbols, length)


@register_problem("algorithmic_identity_binary40")
class AlgorithmicIdentityBinary40(AlgorithmicProblem):
    """Copy a binary sequence."""

    @property
    def num_symbols(self) -> int:
        return 2

    def generator(self, nbr_symbols, max_length, nbr_cases):
        for _ in range(nbr_cases):
            inputs = _random_sequence(nbr_symbols, max_length)
            yield {"inputs": inputs, "targets": inputs}


@register_problem("algorithmic_identity_decimal40")
class AlgorithmicIdentityDecimal40(AlgorithmicIdentityBinary40):
    """Copy a decimal sequence."""

    @property
    def num_symbols(self) -> int:
        return 10


@register_problem("algorithmic_shift_decimal40")
class AlgorithmicShiftDecimal40(AlgorithmicProblem):
    """Add 10 to every symbol of a sequence over 0..9 (20 symbols); dev length 80."""

    @property
    def num_symbols(self) -> int:
        return 20

    @property
    def dev_length(self) -> int:
        return 80

    def generator(self, nbr_symbols, max_length, nbr_cases):
        shift = 10
        for _ in range(nbr_cases):
            inputs = _random_sequence(nbr_symbols - shift, max_length)
            yield {"inputs": inputs, "targets": [i + shift for i in inputs]}


@register_problem("algorithmic_reverse_binary40")
class AlgorithmicReverseBinary40(AlgorithmicProblem):
    """Reverse a binary sequence."""

    @property
    def num_symbols(self) -> int:
        return 2

    def generator(self, nbr_symbols, max_length, nbr_cases):
        for _ in range(nbr_cases):
            inputs = _random_sequence(nbr_symbols, max_length)
            yield {"inputs": inputs, "targets": list(reversed(inputs))}


@register_problem("algorithmic_reverse_decimal40")
class AlgorithmicReverseDecimal40(AlgorithmicReverseBinary40):
    """Reverse a decimal sequence."""

    @property
    def num_symbols(self) -> int:
        return 10


def zipf_distribution(nbr_symbols: int, alpha: float) -> list[float]:
    """Cumulative Zipf distribution over nbr_symbols symbols (t2t's; starts with 0)."""
    tmp = np.power(np.arange(1, nbr_symbols + 1), -alpha)
    zeta = np.r_[0.0, np.cumsum(tmp)]
    return [x / zeta[-1] for x in zeta]


def zipf_random_sample(distr_map: list[float], sample_len: int) -> list[int]:
    """`sample_len` symbols drawn from the cumulative distribution `distr_map`."""
    u = np.random.random(sample_len)
    return list(np.searchsorted(distr_map, u))


def reverse_generator_nlplike(
    nbr_symbols: int, max_length: int, nbr_cases: int, scale_std_dev: float = 100,
    alpha: float = 1.5,
):
    """Reversal of Zipf-distributed sequences with normally distributed lengths (t2t's)."""
    std_dev = max_length / scale_std_dev
    distr_map = zipf_distribution(nbr_symbols, alpha)
    for _ in range(nbr_cases):
        length = int(abs(np.random.normal(loc=max_length / 2, scale=std_dev)) + 1)
        inputs = zipf_random_sample(distr_map, length)
        yield {"inputs": inputs, "targets": list(reversed(inputs))}


@register_problem("algorithmic_reverse_nlplike8k")
class AlgorithmicReverseNlplike8k(AlgorithmicProblem):
    """Reverse NLP-like sequences (Zipf 1.3 over 8000 symbols, length ~N(35, 7))."""

    @property
    def num_symbols(self) -> int:
        return 8000

    @property
    def train_length(self) -> int:
        return 70

    @property
    def dev_length(self) -> int:
        return 70

    def generator(self, nbr_symbols, max_length, nbr_cases):
        return reverse_generator_nlplike(nbr_symbols, max_length, nbr_cases, 10, 1.300)


@register_problem("algorithmic_reverse_nlplike32k")
class AlgorithmicReverseNlplike32k(AlgorithmicReverseNlplike8k):
    """Reverse NLP-like sequences (Zipf 1.05 over 32000 symbols)."""

    @property
    def num_symbols(self) -> int:
        return 32000

    def generator(self, nbr_symbols, max_length, nbr_cases):
        return reverse_generator_nlplike(nbr_symbols, max_length, nbr_cases, 10, 1.050)


def lower_endian_to_number(digits: list[int], base: int) -> int:
    """The number whose base-`base` digits, least significant first, are `digits`."""
    return sum(d * (base**i) for i, d in enumerate(digits))


def number_to_lower_endian(n: int, base: int) -> list[int]:
    """Digits of n in base `base`, least significant first."""
    digits = [n % base]
    while n >= base:
        n //= base
        digits.append(n % base)
    return digits


def random_number_lower_endian(length: int, base: int) -> list[int]:
    """A random `length`-digit number, least significant digit first (no leading zero)."""
    if length == 1:
        return [np.random.randint(base)]
    prefix = _random_symbols(base, length - 1)
    return prefix + [np.random.randint(base - 1) + 1]


class _ArithmeticProblem(AlgorithmicProblem):
    """Two numbers separated by the symbol `base` -> their sum or product (t2t's)."""

    @property
    def vocab_size(self) -> int:
        # One more than t2t: the separator symbol `base` needs an id (see module docstring).
        return self.num_symbols + text_encoder.NUM_RESERVED_TOKENS + 1

    @staticmethod
    def combine(a: int, b: int) -> int:
        raise NotImplementedError

    def generator(self, nbr_symbols, max_length, nbr_cases):
        base = nbr_symbols
        if max_length < 3:
            raise ValueError(f"Maximum length must be at least 3, got {max_length}")
        for _ in range(nbr_cases):
            l1 = np.random.randint(max_length // 2) + 1
            l2 = np.random.randint(max_length - l1 - 1) + 1
            n1 = random_number_lower_endian(l1, base)
            n2 = random_number_lower_endian(l2, base)
            result = self.combine(lower_endian_to_number(n1, base), lower_endian_to_number(n2, base))
            yield {"inputs": n1 + [base] + n2, "targets": number_to_lower_endian(result, base)}


@register_problem("algorithmic_addition_binary40")
class AlgorithmicAdditionBinary40(_ArithmeticProblem):
    """Add two binary numbers (least significant digit first)."""

    @property
    def num_symbols(self) -> int:
        return 2

    @staticmethod
    def combine(a: int, b: int) -> int:
        return a + b


@register_problem("algorithmic_addition_decimal40")
class AlgorithmicAdditionDecimal40(AlgorithmicAdditionBinary40):
    """Add two decimal numbers (least significant digit first)."""

    @property
    def num_symbols(self) -> int:
        return 10


@register_problem("algorithmic_multiplication_binary40")
class AlgorithmicMultiplicationBinary40(_ArithmeticProblem):
    """Multiply two binary numbers (least significant digit first)."""

    @property
    def num_symbols(self) -> int:
        return 2

    @staticmethod
    def combine(a: int, b: int) -> int:
        return a * b


@register_problem("algorithmic_multiplication_decimal40")
class AlgorithmicMultiplicationDecimal40(AlgorithmicMultiplicationBinary40):
    """Multiply two decimal numbers (least significant digit first)."""

    @property
    def num_symbols(self) -> int:
        return 10


@register_problem("algorithmic_reverse_binary40_test")
class AlgorithmicReverseBinary40Test(AlgorithmicReverseBinary40):
    """t2t's tiny test problem: lengths 1..10, 1,000 train / 100 dev examples, 1 shard."""

    @property
    def train_length(self) -> int:
        return 10

    @property
    def dev_length(self) -> int:
        return 10

    @property
    def train_size(self) -> int:
        return 1000

    @property
    def dev_size(self) -> int:
        return 100

    @property
    def num_shards(self) -> int:
        return 1


@register_problem("algorithmic_sort_problem")
class AlgorithmicSortProblem(AlgorithmicProblem):
    """Sort a sequence of numbers 0..19 (lengths 1..10 train, 1..20 dev)."""

    @property
    def num_symbols(self) -> int:
        return max(self.train_length, self.dev_length)

    @property
    def train_length(self) -> int:
        return 10

    @property
    def dev_length(self) -> int:
        return self.train_length * 2

    @property
    def unique(self) -> bool:
        """Draw the numbers without replacement."""
        return False

    def generator(self, nbr_symbols, max_length, nbr_cases):
        for _ in range(nbr_cases):
            length = np.random.randint(max_length) + 1
            if self.unique:
                inputs = np.arange(nbr_symbols)
                np.random.shuffle(inputs)
                inputs = list(inputs[:length])
            else:
                inputs = list(np.random.randint(nbr_symbols, size=length))
            yield {"inputs": inputs, "targets": sorted(inputs)}

    def eval_metrics(self) -> list[str]:
        return super().eval_metrics() + [problem.Metrics.EDIT_DISTANCE]


@register_problem("algorithmic_identity_decimal40_small")
class AlgorithmicIdentityDecimal40Small(_SmallDev, AlgorithmicIdentityDecimal40):
    """algorithmic_identity_decimal40 with a 1,000-example dev set of train lengths."""


@register_problem("algorithmic_reverse_decimal40_small")
class AlgorithmicReverseDecimal40Small(_SmallDev, AlgorithmicReverseDecimal40):
    """algorithmic_reverse_decimal40 with a 1,000-example dev set of train lengths."""
