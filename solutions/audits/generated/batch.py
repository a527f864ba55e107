"""make_batch as seed 004 writes it: character ids over `_^pqabc$`, inputs and next-character targets, right-padded."""
import torch

VOCAB = "_^pqabc$"  # "_" is PAD (id 0), "^" starts a text, "$" ends it
PAD = 0


def make_batch(texts):
    ids = [[VOCAB.index(char) for char in text] for text in texts]
    length = max(len(row) - 1 for row in ids)
    inputs = [row[:-1] + [PAD] * (length - len(row) + 1) for row in ids]
    targets = [row[1:] + [PAD] * (length - len(row) + 1) for row in ids]
    return torch.tensor(inputs), torch.tensor(targets)
