"""Plain setuptools packaging for t2t_lite.

`problems/` and `hparams/` are top-level folders of the repository but install under the
t2t_lite namespace (`t2t_lite.problems`, `t2t_lite.hparams_sets`) so that a pip install does
not drop generic top-level packages named `problems` or `hparams` into site-packages.
"""
from setuptools import find_packages, setup

# The translation server's distributions (the [serve] extra; [test] has them too).
SERVE = ["fastapi>=0.100", "uvicorn>=0.29", "h11", "prometheus-client", "pydantic>=2",
         "starlette"]

# Non-Python files the package reads at run time, as globs relative to t2t_lite/.
PACKAGE_DATA = ["serving/static/*", "layers/native/*.cc", "layers/native/*.h"]

setup(
    name="t2t_lite",
    version="0.1.0",
    description="tensor2tensor's Transformer on TensorFlow 2 / Keras 3",
    python_requires=">=3.10",
    # Found, not listed: a new folder of t2t_lite is packaged without an edit here
    # (tests/test_wheel.py builds the wheel and checks). t2t_lite/problems and
    # t2t_lite/hparams_sets are symlinks to the top-level folders; package_dir maps those
    # names to the real folders, so each file is in the wheel once.
    packages=find_packages(include=["t2t_lite", "t2t_lite.*"]),
    package_dir={
        "t2t_lite": "t2t_lite",
        "t2t_lite.problems": "problems",
        "t2t_lite.hparams_sets": "hparams",
    },
    # Files the package reads at run time besides its modules (the serving page's assets).
    package_data={"t2t_lite": PACKAGE_DATA},
    install_requires=[
        "tensorflow>=2.16,<2.22",
        "keras>=3",
        "tensorflow-datasets",
        "sacrebleu>=2",
        # t2t BLEU tokenization's Unicode classes found fast (evaluation/bleu_hook.py).
        "regex",
        "absl-py",
        "numpy",
        # `tensorboard --logdir` is what every run prints; the HParams dashboard's summaries.
        "tensorboard",
        # Progress bars with a total and a rate on long work (t2t_lite.utils.progress).
        "tqdm",
        # TFRecord framing of datagen's shards without TensorFlow (parallel_datagen.py).
        "google-crc32c",
        # The checkpoint state file's text format (utils/checkpoint_guard.py); TensorFlow's own
        # dependency, imported here directly.
        "protobuf",
    ],
    extras_require={
        # The in-graph encoder's FastWordpiece segmenter (--export_subword_segmenter).
        "text": ["tensorflow-text>=2.16,<2.22"],
        # SentencePiece vocabularies (--vocab_type=sentencepiece; their SavedModel also needs
        # the [text] extra).
        "sentencepiece": ["sentencepiece>=0.1.99"],
        # CTranslate2 export and decoding (t2t_lite.export.ct2).
        "ctranslate2": ["ctranslate2>=4"],
        # Pictures: --mode=plot, --mode=attention and the curves at the end of train_and_eval.
        "viz": ["matplotlib"],
        # The translation server (--mode=serve) and its Insights page; t2t_lite.serving imports
        # pydantic and starlette itself (FastAPI brings them, they are named all the same).
        "serve": SERVE,
        # CI tests the optional paths.
        "test": ["pytest", "pytest-xdist", "hypothesis", "tensorboard",
                 "tensorflow-text>=2.16,<2.22", "sentencepiece>=0.1.99",
                 "ctranslate2>=4", "matplotlib", *SERVE, "selenium"],
        "bench": [],
    },
    # `t2t-lite` and `python -m t2t_lite` run the same function; the repository's run.py too.
    entry_points={"console_scripts": ["t2t-lite=t2t_lite.bin.main:main"]},
)
