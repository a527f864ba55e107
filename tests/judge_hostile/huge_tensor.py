# exercise: masks
"""Hostile: padding_mask(ids, 3) returns 15 million float32 values (60 MB, under the 64 MiB one probe may
record); everything else is the reference. Reading them alone takes the judge twice that, more than the test
course's judge memory limit."""

_reference_padding_mask = padding_mask


def padding_mask(ids, pad_id):
    if pad_id == 3:
        return torch.zeros(15_000_000)
    return _reference_padding_mask(ids, pad_id)
