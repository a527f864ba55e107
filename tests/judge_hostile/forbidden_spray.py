# exercise: layer_norm
"""Hostile: every LayerNorm(...) calls the forbidden F.layer_norm 1,400 times, each time from a line of this file of
its own (one call compiled under this file's name, given a new first line each time). The probes build over
fifteen of them, so the exercise's forbidden-call record holds over 20,000 distinct places; a judge that removed
duplicates by comparing each entry with every other would take minutes over it."""

_OP = torch.ops.aten.native_layer_norm

_SPRAY = compile("_OP(_X, [1], None, None, 1e-5)", __file__, "eval")
_LINE = [100_000]
_PER_MODULE = 1400
_init = LayerNorm.__init__


def _spraying_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    x = torch.zeros(1, 1)
    for _ in range(_PER_MODULE):
        _LINE[0] += 1
        eval(_SPRAY.replace(co_firstlineno=_LINE[0]), {"_OP": _OP, "_X": x})


LayerNorm.__init__ = _spraying_init
