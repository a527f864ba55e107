"""make_batch written another way: a lookup table, then pad_sequence over the input and target halves."""
import torch
from torch.nn.utils.rnn import pad_sequence

VOCAB = "_^pqabc$"
ID = {char: i for i, char in enumerate(VOCAB)}


def make_batch(texts):
    rows = [torch.tensor([ID[char] for char in text]) for text in texts]
    inputs = pad_sequence([row[:-1] for row in rows], batch_first=True, padding_value=ID["_"])
    targets = pad_sequence([row[1:] for row in rows], batch_first=True, padding_value=ID["_"])
    return inputs, targets
