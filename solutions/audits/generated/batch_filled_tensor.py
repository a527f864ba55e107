"""make_batch written another way: a PAD-filled tensor per side, each row's slice copied in."""
import torch

VOCAB = "_^pqabc$"
PAD = 0


def make_batch(texts):
    encoded = [torch.tensor([VOCAB.index(char) for char in text], dtype=torch.long) for text in texts]
    width = max(len(row) for row in encoded) - 1
    inputs = torch.full((len(texts), width), PAD, dtype=torch.long)
    targets = torch.full((len(texts), width), PAD, dtype=torch.long)
    for i, row in enumerate(encoded):
        inputs[i, : len(row) - 1] = row[:-1]
        targets[i, : len(row) - 1] = row[1:]
    return inputs, targets
