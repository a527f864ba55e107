# exercise: masks
"""Hostile: causal_mask(T) returns a tensor subclass whose `.shape` (and `.size()`) says [T, T] while its data is
[2000000, 1, 1]. A judge that took the shape from the object would pass causal_mask_shape, then broadcast two
million values against a [T, T] mask (about 700 bytes of judge memory for each)."""


class _ClaimsSquare(torch.Tensor):
    claimed = (0, 0)

    @property
    def shape(self):
        return torch.Size(self.claimed)

    def size(self, dim=None):
        return torch.Size(self.claimed) if dim is None else self.claimed[dim]


def causal_mask(T, device=None):
    data = torch.ones(2_000_000, 1, 1, dtype=torch.bool, device=device).as_subclass(_ClaimsSquare)
    data.claimed = (T, T)
    return data
