"""The networks of the zoo, built the same way wherever they are exported or
trained beside kiln (export_torchvision.py, test/bench/torch_zoo.py):
torchvision's classifiers by name with 10 classes, and "vit_small", a
reduced Vision Transformer of torchvision's own code (32x32 images,
patches of 4, 4 layers of width 128, 4 heads), whose full-size vit_b_16 is
too large for this project's 2-core machine. Random weights, seed 7."""
import torch
import torchvision

VIT_SMALL = dict(image_size=32, patch_size=4, num_layers=4, num_heads=4, hidden_dim=128,
                 mlp_dim=256, num_classes=10)


def build(name):
    """The network `name` with its fixed random weights."""
    torch.manual_seed(7)
    if name == "vit_small":
        return torchvision.models.VisionTransformer(**VIT_SMALL)
    return getattr(torchvision.models, name)(num_classes=10)
