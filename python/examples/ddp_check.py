"""One training step under DistributedDataParallel against the same step in one process on
the same global batch: `torchrun --nproc_per_node=2 ddp_check.py` (gloo on CPU, nccl on
GPUs), `--float64` for float64 weights, `--no-tf32` for float32 convolutions without
TF32 rounding. Rank 0 prints the largest relative difference of
the gradients (per parameter, relative to its largest gradient) and step times."""

import os
import sys
import time

import torch
from torch import nn

import genes
from semicrf.torch import SemiMarkovCRFHead

if "--float64" in sys.argv:  # the same check without float32 rounding
    torch.set_default_dtype(torch.float64)
if "--no-tf32" in sys.argv:  # cuDNN's convolutions round to TF32 (10 bits) by default
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
dev = torch.device(f"cuda:{os.environ['LOCAL_RANK']}" if torch.cuda.is_available() else "cpu")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)  # the same initial weights in every process
        self.embed = nn.Embedding(5, 16)
        self.conv = nn.Conv1d(16, 32, 9, padding=4)
        self.crf = SemiMarkovCRFHead(num_classes=3, max_duration=64, hidden_dim=32)

    def forward(self, bases, lengths, labels):
        h = torch.relu(self.conv(self.embed(bases).transpose(1, 2))).transpose(1, 2)
        return self.crf.compute_loss(h, lengths, labels)  # the mean over this batch


per_rank = 4
x, y, lengths = genes.batch(
    genes.read_genbank("train.gb")[: per_rank * world],
    crop=3000,
    generator=torch.Generator().manual_seed(0),
)  # the same in every process
x, y, lengths = x.to(dev), y.to(dev), lengths.to(dev)


def step(model, sl):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    model.zero_grad()
    model(x[sl], lengths[sl], y[sl]).backward()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return time.perf_counter() - t0


ddp = nn.parallel.DistributedDataParallel(Model().to(dev))
mine = slice(rank * per_rank, (rank + 1) * per_rank)
times = [step(ddp, mine) for _ in range(5)]
if rank == 0:
    single = Model().to(dev)
    one = [step(single, slice(None)) for _ in range(5)]
    worst, name = max(
        (((a.grad - b.grad).abs().max() / b.grad.abs().max().clamp(min=1e-30)).item(), n)
        for (n, a), b in zip(ddp.module.named_parameters(), single.parameters())
    )
    print(
        f"{world} processes on {dev.type}: largest relative gradient difference {worst:.2e} ({name}); "
        f"step {min(times) * 1e3:.1f} ms with DDP ({per_rank} sequences per process), "
        f"{min(one) * 1e3:.1f} ms in one process ({per_rank * world} sequences)"
    )
torch.distributed.destroy_process_group()
