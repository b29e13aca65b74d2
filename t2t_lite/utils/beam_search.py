"""t2t's module path `tensor2tensor.utils.beam_search`, kept for code written against it:
this name is the search's module `t2t_lite.search.beam_search` itself (the same
module object, private names included)."""
import sys

from t2t_lite.search import beam_search as _beam_search

sys.modules[__name__] = _beam_search
