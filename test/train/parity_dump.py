"""What a kiln test's --dump writes (test/common/parity_dump.h), read for
the PyTorch side of a parity test: tensors.txt's list of the model's
tensors, and a flat float32 array of kiln_model_get_weights's layout cut
into them."""
import numpy as np
import torch


def read_tensors(folder):
    """[(name, trainable, offset, dims)] in kiln_model_get_weights's order."""
    tensors = []
    for line in open(f"{folder}/tensors.txt"):
        name, trainable, offset, *dims = line.split()
        tensors.append((name, int(trainable), int(offset), tuple(int(d) for d in dims)))
    return tensors


def unpack(flat, tensors):
    """{name: float64 tensor}, requiring gradients where kiln trains it."""
    return {name: torch.tensor(flat[offset:offset + int(np.prod(dims))].reshape(dims),
                               dtype=torch.float64, requires_grad=bool(trainable))
            for name, trainable, offset, dims in tensors}
