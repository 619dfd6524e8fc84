"""Small PyTorch networks exported to ONNX for test_import.c (run with
Debian's /usr/bin/python3, which has torch 1.13):

    make_models.py OUTDIR [NAME...]

For each network NAME it writes OUTDIR/NAME.onnx, OUTDIR/NAME.in (the
input, float32, little-endian, NCHW as the graph declares it),
OUTDIR/NAME.out (PyTorch's output on it) and a few parameters as
OUTDIR/NAME.PARAMETER (conv1.weight, bn1.running_var, fc.weight), and lists them in
OUTDIR/models.txt as "NAME N D1 D2 ... : OUTPUTS" lines. Exits 77 when
torch is missing. Fixed seeds: the same files every run. NAMEs: only
those networks (test_import passes $KILN_IMPORT_ONLY, to check a few)."""
import os
import sys

try:
    import torch
    from torch import nn
except ImportError:
    print("torch is not installed for /usr/bin/python3 (Debian: python3-torch)")
    sys.exit(77)


class Cnn(nn.Module):
    """Conv/BN/ReLU/MaxPool, a strided valid conv, GAP, Flatten, Linear."""
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 12, 3, stride=2)
        self.bn2 = nn.BatchNorm2d(12, momentum=0.2, eps=1e-3)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(12, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = torch.sigmoid(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(self.gap(x), 1))


class FlattenNet(nn.Module):
    """A Linear straight after Flatten of a 4-D value: ONNX's (NCHW)
    element order must reach the Gemm."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.pool = nn.AvgPool2d(2)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(4 * 3 * 2, 6)

    def forward(self, x):
        x = self.pool(torch.tanh(self.conv(x)))
        return torch.softmax(self.fc(self.drop(torch.flatten(x, 1))), dim=1)


class Residual(nn.Module):
    """A residual block: two conv/BN branches joined by Add, a Concat on
    channels, then a Reshape to (N, -1) and a Linear."""
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn_a = nn.BatchNorm2d(4)
        self.b = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn_b = nn.BatchNorm2d(4)
        self.fc = nn.Linear(8 * 5 * 5, 3)

    def forward(self, x):
        y = torch.relu(self.bn_a(self.a(x)))
        y = self.bn_b(self.b(y))
        y = torch.relu(y + x)
        z = torch.cat([y, x], dim=1)
        return self.fc(z.reshape(-1, 8 * 5 * 5))


class ViewNet(nn.Module):
    """x.view(x.size(0), -1): the exporter's Shape -> Gather -> Unsqueeze ->
    Concat -> Reshape chain, which kiln folds."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 5, 3)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        return self.fc(x.view(x.size(0), -1))


class Transposes(nn.Module):
    """x.permute: to channels-last and back (a change of layout, no layer in
    kiln), and H and W swapped (a Permute), before a Flatten into Linear;
    an activation between each, or PyTorch joins the permutes into one."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 5 * 4, 3)

    def forward(self, x):
        x = torch.relu(self.conv(x)).permute(0, 2, 3, 1)
        x = torch.tanh(x).permute(0, 3, 1, 2)
        return self.fc(torch.flatten(torch.sigmoid(x).permute(0, 1, 3, 2), 1))


class HardSwishes(nn.Module):
    """nn.Hardswish after a Conv and after an Add, exported at opset 13 as
    HardSigmoid -> Mul(x, .): kiln imports each pair as one hard_silu."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.act1 = nn.Hardswish()
        self.act2 = nn.Hardswish()
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = self.act1(self.conv(x))
        return self.fc(self.act2(x + x).flatten(1))


class Gelus(nn.Module):
    """GELU in both forms and LayerNorm between Linear layers: below opset
    17 (exported at 13) each is a chain of primitive ops that kiln imports
    as one activation or one layer_norm (onnx_import_patterns.c)."""
    def __init__(self, norm):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act1 = nn.GELU()
        self.fc2 = nn.Linear(16, 16)
        self.act2 = nn.GELU(approximate="tanh")
        self.norm = nn.LayerNorm(16) if norm else nn.Identity()
        self.fc3 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc3(self.norm(self.act2(self.fc2(self.act1(self.fc1(x))))))


class Tokens(nn.Module):
    """Token ids (int64, as PyTorch's embeddings take them) through
    nn.Embedding (Gather of the table), flattened into a Linear layer."""
    vocab = 20

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(self.vocab, 6)
        self.fc = nn.Linear(5 * 6, 3)

    def forward(self, ids):
        return self.fc(torch.tanh(self.emb(ids)).flatten(1))


class Mlp(nn.Module):
    """Linear layers on a vector; a MatMul + Add from a bare weight."""
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 16)
        self.fc2 = nn.Linear(16, 8)
        self.w = nn.Parameter(torch.randn(8, 4) * 0.3)
        self.b = nn.Parameter(torch.randn(4) * 0.1)

    def forward(self, x):
        x = torch.tanh(self.fc1(x))
        x = nn.functional.leaky_relu(self.fc2(x), 0.2)
        return torch.matmul(x, self.w) + self.b


class Decoder(nn.Module):
    """Upsampling as decoders write it: ConvTranspose2d stride 2 with
    padding 1 and output_padding 1 (twice the size), one 4x4 stride 2
    padding 1 without bias, and a grouped, dilated one with uneven
    strides, padding and output_padding. (ONNX Runtime refuses to run an
    output_padding at the stride but below the dilation, which PyTorch
    takes; test_onnx checks how kiln exports one.)"""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up1 = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.up2 = nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1, bias=False)
        self.up3 = nn.ConvTranspose2d(4, 2, (3, 2), stride=(1, 2), padding=(2, 0),
                                      output_padding=(0, 1), dilation=(2, 1), groups=2)

    def forward(self, x):
        x = torch.relu(self.conv(x))                    # (8, 5, 5)
        x = torch.relu(self.bn(self.up1(x)))            # (6, 10, 10)
        x = torch.tanh(self.up2(x))                     # (4, 20, 20)
        return torch.sigmoid(self.up3(x))               # (2, 20, 41)


class Windows(nn.Module):
    """The window attributes torchvision's networks use: resnet's 7x7
    stride-2 stem padded 3 and 3x3 stride-2 max pool padded 1, a grouped
    convolution (resnext), a depthwise one with ReLU6 (mobilenet), a
    dilated one, average pools with ceil_mode and with padding. (PyTorch
    writes count_include_pad=True with padding as a Pad before the pool,
    which kiln does not import yet.)"""
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.depthwise = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False)
        self.dilated = nn.Conv2d(8, 6, 3, padding=2, dilation=2)
        self.ceil = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        self.counted = nn.AvgPool2d(2, stride=1, padding=1, count_include_pad=False)
        with torch.no_grad():
            size = self.features(torch.zeros(1, 3, 37, 29)).numel()
        self.fc = nn.Linear(size, 4)

    def features(self, x):
        x = self.pool(torch.relu(self.bn1(self.stem(x))))
        x = torch.relu(self.grouped(x))
        x = nn.functional.relu6(self.depthwise(x))
        return self.counted(self.ceil(self.dilated(x)))

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


class Reduce(nn.Module):
    """ReduceMean over H and W, with keepdims 1 (into a 1x1 Conv) and 0
    (into a Linear), and LogSoftmax over the last axis."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.squeeze = nn.Conv2d(6, 4, 1)
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        a = torch.flatten(self.squeeze(x.mean([2, 3], keepdim=True)), 1)
        return torch.log_softmax(a + self.fc(x.mean([2, 3])), dim=1)


class Channels(nn.Module):
    """Softmax and LogSoftmax over the channels (axis 1) of 4-D values,
    LeakyRelu of PyTorch's slope (0.01) and of 0.3, an AvgPool2d counting
    its padding (written as a Pad before the pool, folded into it)."""
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 5, 3)
        self.conv2 = nn.Conv2d(5, 4, 1)
        self.pool = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=True)

    def forward(self, x):
        x = torch.softmax(nn.functional.leaky_relu(self.conv1(x)), dim=1)
        x = self.pool(nn.functional.leaky_relu(self.conv2(x), 0.3))
        return torch.log_softmax(x, dim=1)


class ZeroPad(nn.Module):
    """nn.ZeroPad2d, whose pads the exporter computes from constants
    (ConstantOfShape, Concat, Reshape, Slice, Transpose, Cast: folded):
    before a Conv (folded into its pads) and before a ReLU (a ZeroPadding2D
    layer)."""
    def __init__(self):
        super().__init__()
        self.pad1 = nn.ZeroPad2d((2, 1, 0, 3))
        self.conv = nn.Conv2d(3, 4, 3)
        self.pad2 = nn.ZeroPad2d((1, 0, 2, 1))
        self.fc = nn.Linear(4 * 12 * 10, 3)

    def forward(self, x):
        x = torch.relu(self.pad2(self.conv(self.pad1(x))))
        return self.fc(torch.flatten(x, 1))


class ReduceOps(nn.Module):
    """Reductions over other axes than H and W: a mean over the channels
    and H kept, a sum over W (the channels and H left, in ONNX's order), an
    amax over the channels, an amin over H and W, a mean over both axes of
    a 3-D value, kept, and an amax over the channels of the value joined to
    itself, where every largest value is tied with its copy (the gradient
    split between them, as amax does, sums back to the whole)."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(4 + 30 + 20 + 6 + 1 + 20, 3)

    def forward(self, x):
        c = self.conv(x)
        parts = [c.mean(dim=(1, 2), keepdim=True), c.sum(-1), c.amax(dim=1), c.amin(dim=(2, 3)),
                 torch.flatten(c, 2).mean(dim=(1, 2), keepdim=True),
                 torch.cat([c, c], 1).amax(dim=1)]
        return self.fc(torch.cat([torch.flatten(p, 1) for p in parts], 1))


class SoftmaxAxes(nn.Module):
    """Softmax over H of a 4-D value, softmax and log_softmax over axis 1
    of a 3-D value (the channels of the flattened image)."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3)
        self.fc = nn.Linear(3 * 5 * 12, 3)

    def forward(self, x):
        c = self.conv(x)
        t = torch.flatten(c, 2)
        parts = [torch.softmax(c, dim=2), torch.softmax(t, dim=1), torch.log_softmax(t, dim=1)]
        return self.fc(torch.cat([torch.flatten(p, 1) for p in parts], 1))


class ConvNeXtBlock(nn.Module):
    """torchvision's CNBlock without its layer scale and stochastic depth,
    ReLU for its GELU: depthwise 7x7 Conv, permute to channels-last,
    LayerNorm, Linear, ReLU, Linear, permute back, residual Add."""
    def __init__(self, dim=8):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        with torch.no_grad():   # away from 1 and 0, so that a swap shows
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(torch.relu(self.pwconv1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class LayerNorms(nn.Module):
    """LayerNormalization over several trailing axes: H and W of a 4-D
    value (axis 2), C, H and W (axis 1), and the last axis of a Linear's
    3-D output; scales and biases away from 1 and 0."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.hw = nn.LayerNorm([3, 4])
        self.chw = nn.LayerNorm([4, 3, 4], eps=1e-3)
        self.fc = nn.Linear(4, 5)
        self.last = nn.LayerNorm(5)
        self.head = nn.Linear(2 * 48 + 60, 3)
        with torch.no_grad():
            for norm in (self.hw, self.chw, self.last):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        c = self.conv(x)
        t = self.last(self.fc(torch.flatten(c, 2).transpose(1, 2)))
        parts = [self.hw(c), self.chw(c), t]
        return self.head(torch.cat([torch.flatten(p, 1) for p in parts], 1))


class Transpose4d(nn.Module):
    """Transposes of a 4-D value other than a change of layout: of a Conv's
    output, held channels-last (one permute from there), and of the graph's
    input, held in ONNX's order."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 3 * 4 + 3 * 5 * 6, 3)

    def forward(self, x):
        a = self.conv(x).permute(0, 3, 2, 1)
        b = x.permute(0, 2, 1, 3)
        return self.fc(torch.cat([torch.flatten(a, 1), torch.flatten(b, 1)], 1))


class ChannelsLastOps(nn.Module):
    """Reductions and a softmax of a Conv's output permuted to (N, H, W, C)
    (ConvNeXt's layout): kiln holds it as it is, and each op reads it so,
    with no permute."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(12 + 4 + 48 + 12, 3)

    def forward(self, x):
        y = self.conv(x).permute(0, 2, 3, 1)
        parts = [y.amax(dim=-1, keepdim=True), y.sum(dim=(1, 2), keepdim=True),
                 torch.softmax(y, dim=1), y.mean(dim=2)]
        return self.fc(torch.cat([torch.flatten(p, 1) for p in parts], 1))


class Permute5d(nn.Module):
    """A 5-D value's axes reordered (the batch first): a Linear on the
    last axis, permute(0, 2, 3, 1, 4), a Linear again."""
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 6)
        self.fc2 = nn.Linear(6, 2)

    def forward(self, x):
        return self.fc2(self.fc1(x).permute(0, 2, 3, 1, 4))


class SqueezeExcite(nn.Module):
    """torchvision's SqueezeExcitation (AdaptiveAvgPool -> Conv -> ReLU ->
    Conv -> Sigmoid -> x * scale): a Mul of (N, C, H, W) by (N, C, 1, 1),
    one broadcast multiply in kiln."""
    def __init__(self):
        super().__init__()
        import torchvision
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.se = torchvision.ops.SqueezeExcitation(8, 4)
        self.fc = nn.Linear(8 * 6 * 5, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.se(torch.relu(self.conv(x))), 1))


class Silu(nn.Module):
    """SiLU as x * torch.sigmoid(x) after a Conv and as nn.SiLU (which torch
    1.13 writes as Sigmoid -> Mul) after another: each the Conv's own
    activation in kiln; and once of a value read elsewhere too (an
    Activation layer)."""
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1)
        self.silu = nn.SiLU()
        self.fc = nn.Linear(6 * 6 * 5, 3)

    def forward(self, x):
        x = self.conv1(x)
        x = self.silu(self.conv2(x * torch.sigmoid(x)))
        t = torch.tanh(x)
        return self.fc(torch.flatten(t * torch.sigmoid(t) + t, 1))


class LayerScale(nn.Module):
    """ConvNeXt's layer scale: an nn.Parameter of shape (C, 1, 1) times a
    4-D value (an initializer: trained)."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.gamma = nn.Parameter(torch.rand(6, 1, 1) + 0.5)
        self.fc = nn.Linear(6 * 6 * 5, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.gamma * torch.tanh(self.conv(x)), 1))


class Constants(nn.Module):
    """x / 2 + 1 and 1 - x (Constant nodes: constants on either side),
    and their product (two computed values)."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 4 * 3, 3)

    def forward(self, x):
        t = torch.tanh(self.conv(x))
        return self.fc(torch.flatten((t / 2 + 1) * (1 - t), 1))


class Broadcasts(nn.Module):
    """(N, 1, D) * (N, T, 1) of two computed values, then + a (D) parameter,
    on a (N, 1, D) input; Max and Min of computed values."""
    def __init__(self):
        super().__init__()
        self.to_t = nn.Linear(6, 5)
        self.bias = nn.Parameter(torch.randn(6))
        self.fc = nn.Linear(5 * 6, 3)

    def forward(self, x):
        q = self.to_t(x).transpose(1, 2)                  # (N, 5, 1)
        y = torch.tanh(x) * q + self.bias                 # (N, 5, 6)
        y = torch.maximum(y, torch.sigmoid(y)) - torch.minimum(y, torch.tanh(q))
        return self.fc(torch.flatten(y, 1))


class Unary(nn.Module):
    """The element-wise unary ops on 4-D values (kiln_math and the hard
    activations): Sqrt, Exp, Log, Erf, Reciprocal, Pow by 3, Neg, Abs,
    Clip of (-1, 2) and of (-0.5, none), HardSigmoid fused into the Conv
    before it, HardSwish, summed (Add of computed values), then tanh and a
    Linear."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.conv2 = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 3 * 2, 3)

    def forward(self, x):
        F = nn.functional
        h = self.conv(x)
        p = torch.clamp(h, -1, 2)
        e = torch.exp(p)
        y = torch.sqrt(e) + torch.log(e) + torch.reciprocal(e) + torch.erf(h) + p ** 3
        y = y + (-h.abs()) + F.hardswish(h) + torch.clamp(h, min=-0.5)
        y = y + F.hardsigmoid(self.conv2(x))
        # tanh keeps the Linear's inputs small: SGD at 0.1 on the sum
        # itself diverges in 3 steps.
        return self.fc(torch.flatten(torch.tanh(y), 1))
class SelfAttention(nn.Module):
    """Self-attention written out: Linear q/k/v, view (N, T, h, d),
    transpose(1, 2), q @ k^T, softmax(-1), @ v, transpose back, reshape,
    Linear: MatMul of computed values batched over (N, h). The scale
    1/sqrt(d) is folded into q's Linear (kiln imports no Div of a computed
    value yet)."""
    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads, self.d = heads, dim // heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        with torch.no_grad():
            self.q.weight *= self.d ** -0.5
            self.q.bias *= self.d ** -0.5

    def forward(self, x):
        n, t, _ = x.shape

        def heads(y):
            return y.view(n, t, self.heads, self.d).transpose(1, 2)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        w = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        return self.out((w @ v).transpose(1, 2).reshape(n, t, -1))


class TokenShapes(nn.Module):
    """Shape ops on (N, T, D) values: torch.split on the last axis (Split),
    torch.cat of the parts on axis -1 (Concat), x[:, 1:] (Slice),
    unsqueeze then squeeze, and ViT's class token x[:, 0] (Gather)."""
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(5, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        a, b = torch.split(self.embed(x), [3, 5], dim=-1)
        y = torch.cat([torch.tanh(a), torch.sigmoid(b)], dim=-1)
        y = y[:, 1:].unsqueeze(1)
        return self.head(y.squeeze(1)[:, 0])


class Repeat(nn.Module):
    """x.unsqueeze(1).expand(-1, 4, -1): Expand of a computed value, its
    shape written as ConstantOfShape/Mul/Equal/Where of constants (folded);
    then a Linear on the repeats and a sum by Linear of the flattened."""
    def __init__(self):
        super().__init__()
        self.mix = nn.Linear(6, 6)
        self.head = nn.Linear(4 * 6, 3)

    def forward(self, x):
        y = torch.tanh(self.mix(x.unsqueeze(1).expand(-1, 4, -1)))
        return self.head(torch.flatten(y, 1))


class ChannelSlices(nn.Module):
    """Shape ops on a Conv's 4-D output, which kiln holds channels-last:
    x[:, 1:3, 1:, ::2] (Slice, taken as held), torch.split of the channels
    (Split), x[:, 0] (Gather, then the channels' axis dropped)."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(2 * 4 * 3 + 5 * 6 + 3 * 5 * 6, 3)

    def forward(self, x):
        c = torch.tanh(self.conv(x))                      # (N, 4, 5, 6)
        a, b = torch.split(c, [1, 3], dim=1)
        y = c[:, 1:3, 1:, ::2]
        return self.fc(torch.cat([torch.flatten(y, 1), torch.flatten(c[:, 0], 1),
                                  torch.flatten(b, 1)], dim=1))


def torchvision_model(name):
    """A torchvision classifier with random weights and 10 classes."""
    import torchvision
    return getattr(torchvision.models, name)(num_classes=10)


def randomise_statistics(model):
    """Moving statistics away from 0 and 1, so that a swap shows."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)


class Attention(nn.Module):
    """nn.MultiheadAttention(batch_first=True) on itself, as PyTorch 1.13
    exports it: (T, N, E) order, the batch folded into the heads; kiln
    imports the block as one MultiHeadAttention layer."""
    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        with torch.no_grad():   # biases away from PyTorch's zeros
            self.attn.in_proj_bias.normal_(0, 0.3)
            self.attn.out_proj.bias.normal_(0, 0.3)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class CrossAttention(nn.Module):
    """nn.MultiheadAttention(batch_first=True) of x (N, 5, E) over a memory
    (N, 3, E) computed from it (an encoder: a Linear, tanh, positions 1..3),
    as a decoder attends over an encoder's output: PyTorch 1.13 exports the
    packed in_proj split into the query's rows and the key and value's, a
    projection each; kiln imports one MultiHeadAttention of two inputs.
    kdim: the memory (N, 3, kdim) and kdim = vdim, which PyTorch holds as
    separate q_proj_weight (E, E), k_proj_weight and v_proj_weight (E,
    kdim) beside the one in_proj_bias (3E)."""
    def __init__(self, dim=8, heads=2, kdim=None):
        super().__init__()
        self.enc = nn.Linear(dim, kdim or dim)
        self.attn = nn.MultiheadAttention(dim, heads, kdim=kdim, vdim=kdim, batch_first=True)
        with torch.no_grad():   # biases away from PyTorch's zeros
            self.attn.in_proj_bias.normal_(0, 0.3)
            self.attn.out_proj.bias.normal_(0, 0.3)

    def forward(self, x):
        memory = torch.tanh(self.enc(x))[:, 1:4]
        return self.attn(x, memory, memory, need_weights=False)[0]


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer(batch_first=True): attention, residual,
    LayerNorm, a ReLU MLP (no dropout, so that training compares)."""
    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.enc(x)


class CharLm(nn.Module):
    """A character language model: int64 ids -> Embedding -> 2 causal
    nn.TransformerEncoder layers (generate_square_subsequent_mask: an Add
    of a 0/-inf matrix before the Softmax, kiln's causal attention) ->
    Linear to the vocabulary."""
    vocab = 11

    def __init__(self, length=6):
        super().__init__()
        self.emb = nn.Embedding(self.vocab, 8)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(8, self.vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(length))
        with torch.no_grad():   # layers of their own (the exporter writes equal ones once)
            for p in self.enc.layers[1].parameters():
                p.add_(torch.randn_like(p) * 0.1)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids), mask=self.mask))


class VitBlocks(nn.Module):
    """Two of torchvision's own ViT EncoderBlocks (LayerNorm,
    nn.MultiheadAttention, GELU MLP) and its final LayerNorm, on (N, T, D)
    tokens: torchvision's VisionTransformer without its patch projection and
    class token."""
    def __init__(self):
        super().__init__()
        from torchvision.models.vision_transformer import EncoderBlock
        self.blocks = nn.Sequential(*[EncoderBlock(2, 8, 16, 0.0, 0.0) for _ in range(2)])
        self.ln = nn.LayerNorm(8, eps=1e-6)

    def forward(self, x):
        return self.ln(self.blocks(x))


# nn.MultiheadAttention's packed in_proj is three kiln kernels and biases,
# named "<in_proj_weight>/query" etc. (docs/importing.md): train_steps writes
# the three parts under those names.
PACKED = ("in_proj_weight", "in_proj_bias")


def write(path, tensor):
    """float32, or int32 for integer tensors (ids), little-endian, raw."""
    kind = "<i4" if not tensor.is_floating_point() else "<f4"
    with open(path, "wb") as f:
        f.write(tensor.detach().contiguous().numpy().astype(kind).tobytes())


def sample_input(model, shape):
    """A model's input: ids in [0, model.vocab) for a model of ids (its
    name starts with ids_ and it has a vocab), else normal floats."""
    vocab = getattr(model, "vocab", None)
    return torch.randint(0, vocab, shape) if vocab else torch.randn(*shape)


def export(outdir, name, model, shape, **kwargs):
    torch.manual_seed(len(name))
    model.eval()
    x = sample_input(model, shape)
    opset = kwargs.pop("opset_version", 17)
    torch.onnx.export(model, x, os.path.join(outdir, name + ".onnx"), opset_version=opset,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, **kwargs)
    # After the export: a training-form export traces the model in train
    # mode, which moves batch norm's statistics that the file then holds.
    model.eval()
    with torch.no_grad():
        y = model(x)
    write(os.path.join(outdir, name + ".in"), x)
    for pname, value in model.state_dict().items():   # read back by name
        if pname in ("conv1.weight", "bn1.running_var", "fc.weight"):
            write(os.path.join(outdir, "%s.%s" % (name, pname)), value)
    write(os.path.join(outdir, name + ".out"), y)
    return "%s %s : %d\n" % (name, " ".join(str(d) for d in shape), y.numel())


TRAINED = {
    "cnn": ("conv1.weight", "bn1.weight", "bn1.running_mean", "bn1.running_var", "fc.weight"),
    "ids_tokens": ("emb.weight", "fc.weight", "fc.bias"),
    "hard_swishes": ("conv.weight", "conv.bias", "fc.weight"),
    "gelus": ("fc1.weight", "fc2.weight", "fc3.weight", "fc3.bias"),
    "channels": ("conv1.weight", "conv1.bias", "conv2.weight"),
    "reduce": ("conv.weight", "squeeze.weight", "fc.weight", "fc.bias"),
    "zeropad": ("conv.weight", "fc.weight"),
    "reduce_ops": ("conv.weight", "conv.bias", "fc.weight"),
    "channels_last_ops": ("conv.weight", "fc.weight"),
    "layer_norms": ("conv.weight", "hw.weight", "hw.bias", "chw.weight", "chw.bias",
                    "last.weight", "fc.bias"),
    "softmax_axes": ("conv.weight", "fc.weight"),
    "gelus_norm": ("norm.weight", "norm.bias", "fc3.bias"),
    # Its Linear weights reach kiln through Transpose(W) -> MatMul: each is
    # the parameter W all the same.
    "convnext_block13": ("dwconv.weight", "norm.weight", "norm.bias", "pwconv1.weight",
                         "pwconv1.bias", "pwconv2.weight", "pwconv2.bias"),
    "convnext_block": ("dwconv.weight", "norm.weight", "norm.bias", "pwconv1.weight",
                       "pwconv1.bias", "pwconv2.weight", "pwconv2.bias"),
    "decoder": ("up1.weight", "up2.weight", "up3.weight", "bn.running_var"),
    "layerscale": ("gamma", "conv.weight", "conv.bias"),
    "broadcasts": ("bias", "to_t.weight", "to_t.bias"),
    "unary": ("conv.weight", "conv.bias", "conv2.weight", "fc.weight"),
    "attention": ("attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight",
                  "attn.out_proj.bias"),
    "attention13": ("attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight"),
    "attention_cross": ("enc.weight", "attn.in_proj_weight", "attn.in_proj_bias",
                        "attn.out_proj.weight", "attn.out_proj.bias"),
    "attention_cross13": ("enc.bias", "attn.in_proj_weight", "attn.out_proj.weight"),
    "attention_kdim": ("enc.weight", "attn.q_proj_weight", "attn.k_proj_weight",
                       "attn.v_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight"),
    "attention_kdim13": ("attn.q_proj_weight", "attn.k_proj_weight", "attn.v_proj_weight",
                         "attn.in_proj_bias", "attn.out_proj.bias"),
    "encoder_layer": ("enc.self_attn.in_proj_weight", "enc.self_attn.out_proj.weight",
                      "enc.linear1.weight", "enc.norm2.weight"),
    "encoder_layer13": ("enc.self_attn.in_proj_weight", "enc.self_attn.in_proj_bias",
                        "enc.linear2.weight"),
    "vit_blocks": ("blocks.0.self_attention.in_proj_weight", "blocks.1.mlp.0.weight",
                   "blocks.1.self_attention.out_proj.bias", "ln.weight"),
    "vit_blocks13": ("blocks.1.self_attention.in_proj_weight", "blocks.0.ln_1.bias"),
    "ids_char_lm": ("emb.weight", "enc.layers.0.self_attn.in_proj_weight",
                    "enc.layers.1.self_attn.out_proj.weight", "head.weight"),
    "ids_char_lm13": ("enc.layers.1.self_attn.in_proj_weight",
                      "enc.layers.0.self_attn.in_proj_bias", "head.bias"),
    "gemm_scaled": ("weight", "bias"),
    "gemm_beta0": ("weight",),
    "gemm_transb0": ("weight", "bias"),
}


# Trained with SGD's momentum (written to NAME.momentum, which test_import
# reads): the attention models, whose steps then depend on the earlier ones'.
MOMENTUM = {"attention": 0.9, "attention13": 0.9, "attention_cross": 0.9,
            "attention_cross13": 0.9, "attention_kdim": 0.9, "attention_kdim13": 0.9,
            "encoder_layer": 0.9,
            "encoder_layer13": 0.9, "vit_blocks": 0.9, "vit_blocks13": 0.9,
            "ids_char_lm": 0.9, "ids_char_lm13": 0.9, "gemm_scaled": 0.9, "gemm_beta0": 0.9,
            "gemm_transb0": 0.9}


def train_steps(outdir, name, model, shape, steps=3, lr=0.1):
    """PyTorch's SGD steps on one fixed batch in train mode (batch norm on
    batch statistics), MSE against fixed targets (3 steps; 5 with the
    momentum MOMENTUM gives), from the exported
    weights: NAME.target, and after the steps NAME.trained.PARAMETER for
    the parameters and statistics TRAINED lists, which NAME.trained lists
    with their shapes ("PARAMETER D1 D2 ..." lines)."""
    torch.manual_seed(11)
    x = sample_input(model, shape)
    with torch.no_grad():
        target = torch.randn_like(model(x))
    write(os.path.join(outdir, name + ".train_in"), x)
    write(os.path.join(outdir, name + ".target"), target)
    model.train()
    momentum = MOMENTUM.get(name, 0.0)
    if momentum:
        with open(os.path.join(outdir, name + ".momentum"), "w") as f:
            f.write("%r\n" % momentum)
        steps = 5
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
    # A LayerNorm's scale and bias over several axes are one axis in kiln
    # (the importer normalises the axes flattened): listed as one, so that
    # test_import does not take a 2-D one for a Linear's weight.
    flat = {"%s.%s" % (mname, p) for mname, mod in model.named_modules()
            if isinstance(mod, nn.LayerNorm) for p in ("weight", "bias")}
    flat |= set(getattr(model, "as_is", ()))   # 2-D, but in kiln's layout already
    with open(os.path.join(outdir, name + ".trained"), "w") as f:
        for pname, value in model.state_dict().items():
            if pname in TRAINED[name] and pname.endswith(PACKED):
                for part, rows in zip(("query", "key", "value"), value.chunk(3)):
                    if part == "key" and pname.endswith("bias"):
                        continue   # no gradient: it adds one number to a row of scores
                    os.makedirs(os.path.join(outdir, "%s.trained.%s" % (name, pname)),
                                exist_ok=True)
                    write(os.path.join(outdir, "%s.trained.%s/%s" % (name, pname, part)), rows)
                    f.write("%s/%s %s\n" % (pname, part, " ".join(str(d) for d in rows.shape)))
            elif pname in TRAINED[name]:
                write(os.path.join(outdir, "%s.trained.%s" % (name, pname)), value)
                shape = (value.numel(),) if pname in flat else value.shape
                f.write("%s %s\n" % (pname, " ".join(str(d) for d in shape)))


def export_graph(outdir, name, nodes, weights, x, y, opset=17):
    """A graph written with ONNX's helpers (ops PyTorch 1.13 does not
    write: a Pad of constant pads before a Conv, GlobalMaxPool, opset 18's
    ReduceMean), computed in PyTorch as y; weights name -> tensor."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(v.detach().numpy(), k) for k, v in weights.items()]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, ["batch"] + list(x.shape[1:]))], [
        helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch"] +
                                      list(y.shape[1:]))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    if opset <= 17:   # Debian's onnx 1.12 knows opsets up to 17
        onnx.checker.check_model(m)
    onnx.save(m, os.path.join(outdir, name + ".onnx"))
    write(os.path.join(outdir, name + ".in"), x)
    write(os.path.join(outdir, name + ".out"), y)
    return "%s %s : %d\n" % (name, " ".join(str(d) for d in x.shape), y.numel())


class TwoTowers(nn.Module):
    """A two-tower recommender: user and item ids (two int64 inputs), an
    embedding each, their dot product plus an MLP of both."""
    def __init__(self):
        super().__init__()
        self.user = nn.Embedding(7, 4)
        self.item = nn.Embedding(9, 4)
        self.mlp = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 1))

    def forward(self, user, item):
        a, b = self.user(user).flatten(1), self.item(item).flatten(1)
        return self.mlp(torch.cat([a, b], 1)) + (a * b).sum(1, keepdim=True)


TOWERS_TRAINED = ("user.weight", "item.weight", "mlp.0.weight", "mlp.2.bias")


class ScaledGemm(nn.Module):
    """ONNX Gemm's Y = alpha A B' + beta C written by hand: a Linear whose
    product is scaled by alpha and bias by beta (none when beta is 0), its
    weight (out, in) under transB 1, else (in, out), which kiln keeps as it
    is (as_is: compared unchanged)."""
    def __init__(self, alpha, beta, trans_b, n_in=5, n_out=3):
        super().__init__()
        self.alpha, self.beta, self.trans_b = alpha, beta, trans_b
        shape = (n_out, n_in) if trans_b else (n_in, n_out)
        self.weight = nn.Parameter(torch.randn(*shape) * 0.4)
        self.bias = nn.Parameter(torch.randn(n_out) * 0.3) if beta else None
        self.as_is = () if trans_b else ("weight",)

    def forward(self, x):
        y = self.alpha * (x @ (self.weight.t() if self.trans_b else self.weight))
        return y + self.beta * self.bias if self.bias is not None else y

    def onnx(self, outdir, name, x):
        """The Gemm as one node (with a C of its own when beta is 0, which
        Gemm then ignores)."""
        from onnx import helper
        bias = self.bias if self.bias is not None else torch.full((3,), 7.0)
        node = helper.make_node("Gemm", ["input", "weight", "bias"], ["output"], name="gemm",
                                alpha=self.alpha, beta=self.beta, transB=self.trans_b)
        with torch.no_grad():
            return export_graph(outdir, name, [node], {"weight": self.weight, "bias": bias}, x,
                                self(x))


def gemms(outdir):
    """gemm_scaled (alpha 0.5, beta 2), gemm_beta0 (alpha 0.5, beta 0: C
    ignored), gemm_transb0 (alpha 2, beta 0.5, B (in, out)): each imported,
    trained (5 SGD steps with momentum 0.9) and exported by test_import."""
    lines = []
    for name, alpha, beta, trans_b in (("gemm_scaled", 0.5, 2.0, 1), ("gemm_beta0", 0.5, 0.0, 1),
                                       ("gemm_transb0", 2.0, 0.5, 0)):
        torch.manual_seed(3)
        model = ScaledGemm(alpha, beta, trans_b)
        lines.append(model.onnx(outdir, name, torch.randn(4, 5)))
        train_steps(outdir, name, model, (4, 5))
    return lines


def two_towers(outdir, batch=6, steps=3, lr=0.1):
    """two_towers.onnx (opset 13) and, for test_import's check_two_towers:
    .user and .item (int32 ids, (batch, 1) each), .out (PyTorch's output),
    .target, and .trained.PARAMETER after `steps` SGD steps (MSE)."""
    torch.manual_seed(5)
    model = TwoTowers().eval()
    user, item = torch.randint(0, 7, (batch, 1)), torch.randint(0, 9, (batch, 1))
    base = os.path.join(outdir, "two_towers")
    torch.onnx.export(model, (user, item), base + ".onnx", opset_version=13,
                      input_names=["user", "item"], output_names=["score"],
                      dynamic_axes={"user": {0: "batch"}, "item": {0: "batch"},
                                    "score": {0: "batch"}},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    with torch.no_grad():
        y = model(user, item)
        target = torch.randn_like(y)
    for suffix, t in ((".user", user), (".item", item), (".out", y), (".target", target)):
        write(base + suffix, t)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(user, item), target).backward()
        opt.step()
    for name, value in model.state_dict().items():
        if name in TOWERS_TRAINED:
            write("%s.trained.%s" % (base, name), value)


class PaddedAttention(Attention):
    """Attention's block with a key_padding_mask: a (N, 5) bool graph input,
    True where a position is padding, which kiln imports as the
    MultiHeadAttention's padding mask (an Input of floats 0 and 1); with
    `causal`, generate_square_subsequent_mask's attn_mask beside it."""
    def __init__(self, causal=False):
        super().__init__()
        self.mask = nn.Transformer.generate_square_subsequent_mask(5) if causal else None

    def forward(self, x, pad):
        return self.attn(x, x, x, attn_mask=self.mask, key_padding_mask=pad,
                         need_weights=False)[0]


# Each row keeps a position it sees: PyTorch gives NaN for a row that sees
# nothing (kiln 0 there, which test_import checks on its own); under the
# causal mask row 0 sees position 0 alone.
PADS = ((0, 0, 0, 1, 1), (0, 1, 0, 1, 0), (0, 0, 0, 0, 0), (1, 1, 1, 1, 0))
CAUSAL_PADS = ((0, 0, 0, 1, 1), (0, 1, 0, 1, 0), (0, 0, 0, 0, 0), (0, 1, 1, 1, 1))


def padded_attention(outdir, name, opset, causal=False, steps=5, lr=0.1, momentum=0.9):
    """NAME.onnx of PaddedAttention (inputs "input" (N, 5, 8) and "pad"),
    and for test_import's check_padded: .in, .pad (int32 0 or 1), .out,
    .target, and after `steps` SGD steps with momentum (MSE) on them,
    .trained.PARAMETER for the parameters .trained lists, as train_steps
    writes them."""
    torch.manual_seed(7)
    model = PaddedAttention(causal).eval()
    pads = CAUSAL_PADS if causal else PADS
    x, pad = torch.randn(len(pads), 5, 8), torch.tensor(pads, dtype=torch.bool)
    base = os.path.join(outdir, name)
    torch.onnx.export(model, (x, pad), base + ".onnx", opset_version=opset,
                      input_names=["input", "pad"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "pad": {0: "batch"},
                                    "output": {0: "batch"}},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    with torch.no_grad():
        y = model(x, pad)
        target = torch.randn_like(y)
    for suffix, t in ((".in", x), (".pad", pad.int()), (".out", y), (".target", target)):
        write(base + suffix, t)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x, pad), target).backward()
        opt.step()
    with open(base + ".trained", "w") as f:
        for pname, value in model.state_dict().items():
            if pname.endswith(PACKED):
                for part, rows in zip(("query", "key", "value"), value.chunk(3)):
                    if part == "key" and pname.endswith("bias"):
                        continue   # no gradient (train_steps says why)
                    os.makedirs("%s.trained.%s" % (base, pname), exist_ok=True)
                    write("%s.trained.%s/%s" % (base, pname, part), rows)
                    f.write("%s/%s %s\n" % (pname, part, " ".join(str(d) for d in rows.shape)))
            else:
                write("%s.trained.%s" % (base, pname), value)
                f.write("%s %s\n" % (pname, " ".join(str(d) for d in value.shape)))


def graphs(outdir):
    """pad_conv: Pad (asymmetric) -> Conv (padded 1) -> GlobalMaxPool ->
    Flatten -> Gemm; reduce18: Conv -> ReduceMean (axes an input, opset 18,
    keepdims 0) -> Gemm."""
    from onnx import helper
    F = nn.functional
    torch.manual_seed(5)
    x = torch.randn(2, 3, 7, 6)
    w, b = torch.randn(4, 3, 3, 3) * 0.3, torch.randn(4) * 0.1
    fw, fb = torch.randn(3, 4) * 0.3, torch.randn(3) * 0.1
    pads = torch.tensor([0, 0, 1, 2, 0, 0, 3, 1])    # top 1, left 2, bottom 3, right 1
    y = F.linear(torch.flatten(F.adaptive_max_pool2d(
        F.conv2d(F.pad(x, (2, 1, 1, 3)), w, b, padding=1), 1), 1), fw, fb)
    nodes = [helper.make_node("Pad", ["input", "pads"], ["p"], name="pad", mode="constant"),
             helper.make_node("Conv", ["p", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                              kernel_shape=[3, 3]),
             helper.make_node("GlobalMaxPool", ["c"], ["g"], name="gmp"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["output"], name="fc", transB=1)]
    lines = [export_graph(outdir, "pad_conv", nodes, {"pads": pads, "w": w, "b": b, "fw": fw,
                                                      "fb": fb}, x, y)]
    y = F.linear(F.conv2d(x, w, b).mean([2, 3]), fw, fb)
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], name="conv"),
             helper.make_node("ReduceMean", ["c", "axes"], ["m"], name="mean", keepdims=0),
             helper.make_node("Gemm", ["m", "fw", "fb"], ["output"], name="fc", transB=1)]
    lines.append(export_graph(outdir, "reduce18", nodes, {"axes": torch.tensor([-1, 2]),
                                                          "w": w, "b": b, "fw": fw, "fb": fb},
                              x, y, opset=18))
    # Pads no Conv or AveragePool can take (ZeroPadding2D layers): one
    # read by a Relu, one before a pool whose own pads are not counted.
    y = F.pad(torch.relu(F.pad(F.conv2d(x, w, b), (0, 2, 1, 0))), (1, 1, 0, 2))
    y = torch.flatten(F.avg_pool2d(y, 3, stride=2, padding=1, count_include_pad=False), 1)
    gw = torch.randn(3, y.shape[1]) * 0.1
    y = F.linear(y, gw, fb)
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], name="conv"),
             helper.make_node("Pad", ["c", "pads1"], ["p1"], name="pad1"),
             helper.make_node("Relu", ["p1"], ["r"], name="relu"),
             helper.make_node("Pad", ["r", "pads2"], ["p2"], name="pad2"),
             helper.make_node("AveragePool", ["p2"], ["a"], name="pool", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["a"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "gw", "fb"], ["output"], name="fc", transB=1)]
    weights = {"pads1": torch.tensor([0, 0, 1, 0, 0, 0, 0, 2]),
               "pads2": torch.tensor([0, 0, 0, 1, 0, 0, 2, 1]), "w": w, "b": b, "gw": gw,
               "fb": fb}
    lines.append(export_graph(outdir, "pad_layer", nodes, weights, x, y))
    # A Concat of 11 values (torchvision's densenet joins up to 48).
    c = F.conv2d(x, w, b)
    parts = [c, torch.relu(c)] * 5 + [c]
    gw = torch.randn(3, 4 * 11) * 0.1
    y = F.linear(torch.flatten(F.adaptive_max_pool2d(torch.cat(parts, 1), 1), 1), gw, fb)
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Concat", ["c", "r"] * 5 + ["c"], ["j"], name="join", axis=1),
             helper.make_node("GlobalMaxPool", ["j"], ["g"], name="gmp"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "gw", "fb"], ["output"], name="fc", transB=1)]
    lines.append(export_graph(outdir, "concat_many", nodes, {"w": w, "b": b, "gw": gw,
                                                             "fb": fb}, x, y))
    # Max of three values (chained), Min of one (the value), Min with a
    # (C, 1, 1) initializer; PyTorch writes Max and Min of two only.
    k = torch.randn(4, 1, 1) * 0.3
    m = torch.maximum(torch.maximum(c, torch.relu(c)), torch.tanh(c))
    gw = torch.randn(3, 4 * 5 * 4) * 0.1
    y = F.linear(torch.flatten(torch.minimum(m, k), 1), gw, fb)
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Tanh", ["c"], ["t"], name="tanh"),
             helper.make_node("Max", ["c", "r", "t"], ["m"], name="max3"),
             helper.make_node("Min", ["m"], ["m1"], name="min1"),
             helper.make_node("Min", ["m1", "k"], ["mk"], name="min_k"),
             helper.make_node("Flatten", ["mk"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "gw", "fb"], ["output"], name="fc", transB=1)]
    lines.append(export_graph(outdir, "max_min", nodes, {"w": w, "b": b, "k": k, "gw": gw,
                                                         "fb": fb}, x, y))
    return lines


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    preserve = dict(training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    lines = []
    for name, make, shape, kwargs in [
        ("cnn", Cnn, (3, 3, 12, 10), preserve),
        ("cnn_folded", Cnn, (3, 3, 12, 10), {}),
        ("flatten", FlattenNet, (2, 2, 8, 6), preserve),
        ("residual", Residual, (2, 4, 5, 5), preserve),
        ("mlp", Mlp, (4, 10), preserve),
        ("ids_tokens", Tokens, (3, 5), preserve),
        ("gelus", lambda: Gelus(False), (4, 8), dict(preserve, opset_version=13)),
        # The LayerNorm chain (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
        # Div, Mul, Add) as one LayerNormalization, then one layer_norm.
        ("gelus_norm", lambda: Gelus(True), (4, 8), dict(preserve, opset_version=13)),
        ("convnext_block13", ConvNeXtBlock, (2, 8, 9, 7), dict(preserve, opset_version=13)),
        ("hard_swishes", HardSwishes, (2, 3, 6, 6), dict(preserve, opset_version=13)),
        ("view", ViewNet, (2, 3, 4, 5), preserve),
        ("transposes", Transposes, (2, 3, 4, 5), preserve),
        ("windows", Windows, (2, 3, 37, 29), preserve),
        ("decoder", Decoder, (2, 3, 10, 9), preserve),
        ("resnet18", lambda: torchvision_model("resnet18"), (2, 3, 64, 64), preserve),
        ("resnet18_folded", lambda: torchvision_model("resnet18"), (2, 3, 64, 64), {}),
        ("mobilenet_v2", lambda: torchvision_model("mobilenet_v2"), (2, 3, 64, 64), preserve),
        ("reduce", Reduce, (2, 3, 5, 4), preserve),
        ("channels", Channels, (2, 3, 9, 8), preserve),
        ("zeropad", ZeroPad, (2, 3, 8, 8), preserve),
        ("zeropad_folded", ZeroPad, (2, 3, 8, 8), {}),
        ("reduce_ops", ReduceOps, (2, 3, 5, 4), preserve),
        ("softmax_axes", SoftmaxAxes, (2, 3, 5, 6), preserve),
        # Before opset 13 Softmax covers every axis from its own on: PyTorch
        # writes a Transpose around it.
        ("softmax_axes11", SoftmaxAxes, (2, 3, 5, 6), dict(preserve, opset_version=11)),
        ("convnext_block", ConvNeXtBlock, (2, 8, 9, 7), preserve),
        ("permute5d", Permute5d, (2, 2, 3, 4, 5), preserve),
        ("layer_norms", LayerNorms, (2, 3, 5, 6), preserve),
        ("transpose4d", Transpose4d, (2, 3, 5, 6), preserve),
        ("channels_last_ops", ChannelsLastOps, (2, 3, 5, 6), preserve),
        ("squeeze_excite", SqueezeExcite, (2, 3, 6, 5), preserve),
        ("silu", Silu, (2, 3, 6, 5), preserve),
        ("layerscale", LayerScale, (2, 3, 6, 5), preserve),
        ("constants", Constants, (2, 3, 6, 5), preserve),
        ("broadcasts", Broadcasts, (3, 1, 6), preserve),
        ("unary", Unary, (2, 3, 5, 4), preserve),
        ("self_attention", SelfAttention, (2, 5, 8), preserve),
        ("attention", Attention, (2, 5, 8), preserve),
        ("attention13", Attention, (2, 5, 8), dict(preserve, opset_version=13)),
        ("attention_cross", CrossAttention, (2, 5, 8), preserve),
        ("attention_cross13", CrossAttention, (2, 5, 8), dict(preserve, opset_version=13)),
        ("attention_kdim", lambda: CrossAttention(kdim=6), (2, 5, 8), preserve),
        ("attention_kdim13", lambda: CrossAttention(kdim=6), (2, 5, 8),
         dict(preserve, opset_version=13)),
        ("encoder_layer", EncoderLayer, (3, 4, 8), preserve),
        ("encoder_layer13", EncoderLayer, (3, 4, 8), dict(preserve, opset_version=13)),
        ("vit_blocks", VitBlocks, (2, 5, 8), preserve),
        ("vit_blocks13", VitBlocks, (2, 5, 8), dict(preserve, opset_version=13)),
        ("ids_char_lm", CharLm, (3, 6), preserve),
        ("ids_char_lm13", CharLm, (3, 6), dict(preserve, opset_version=13)),
        ("tokens", TokenShapes, (3, 4, 5), preserve),
        ("repeat", Repeat, (3, 6), preserve),
        ("channel_slices", ChannelSlices, (2, 3, 7, 8), preserve),
        # Training-form BatchNormalization (and Dropout): ONNX Runtime
        # normalises it with the batch's statistics, kiln's predict with
        # the moving ones, as PyTorch's eval does (test_import compares
        # kiln with PyTorch only there).
        ("train_cnn", Cnn, (3, 3, 12, 10), dict(training=torch.onnx.TrainingMode.TRAINING,
                                                do_constant_folding=False)),
        ("train_flatten", FlattenNet, (2, 2, 8, 6),
         dict(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)),
    ]:
        if len(sys.argv) > 2 and name not in sys.argv[2:]:
            continue
        torch.manual_seed(7)
        model = make()
        randomise_statistics(model)
        lines.append(export(outdir, name, model, shape, **kwargs))
        if name in TRAINED:
            train_steps(outdir, name, model, shape)
    if len(sys.argv) < 3 or "two_towers" in sys.argv[2:]:
        two_towers(outdir)
    for name, opset, causal in (("attention_padded", 17, False), ("attention_padded13", 13, False),
                                ("attention_padded_causal", 17, True)):
        if len(sys.argv) < 3 or name in sys.argv[2:]:
            padded_attention(outdir, name, opset, causal)
    lines += [line for line in graphs(outdir) + gemms(outdir)
              if len(sys.argv) < 3 or line.split()[0] in sys.argv[2:]]
    with open(os.path.join(outdir, "models.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
