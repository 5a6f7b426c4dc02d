"""A gene segmenter, a dilated CNN over the bases plus a semi-CRF head, on the embedded fly
genes: `python train_genes.py --steps 200`. The same script trains under
DistributedDataParallel with `torchrun --nproc_per_node=2 train_genes.py` (gloo on CPU,
nccl on GPUs): the semi-CRF is one layer of the model, its parameters reduced like any other."""

import argparse
import os
import time

import torch
from torch import nn

import genes
from semicrf.torch import SemiMarkovCRFHead

ap = argparse.ArgumentParser()
for flag, default in (("--steps", 200), ("--batch", 8), ("--crop", 2000), ("--max-duration", 64)):
    ap.add_argument(flag, type=int, default=default)
args = ap.parse_args()
rank, ddp = int(os.environ.get("RANK", 0)), "RANK" in os.environ
cuda = torch.cuda.is_available()
dev = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', 0)}" if cuda else "cpu")
if ddp:
    torch.distributed.init_process_group("nccl" if cuda else "gloo")
torch.manual_seed(0)


class Segmenter(nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.embed = nn.Embedding(5, width)  # a, c, g, t, other
        self.convs = nn.ModuleList(
            nn.Conv1d(width, width, 9, dilation=d, padding=4 * d) for d in (1, 4, 16, 64)
        )
        self.crf = SemiMarkovCRFHead(3, max_duration=args.max_duration, hidden_dim=width)

    def forward(self, bases, lengths, labels=None):  # the loss, or the best label of every base
        h = self.embed(bases).transpose(1, 2)
        for conv in self.convs:
            h = h + torch.relu(conv(h))
        h = h.transpose(1, 2)
        if labels is None:
            return self.crf.decode_with_traceback(h, lengths).labels
        return self.crf.compute_loss(h, lengths, labels)


model = Segmenter().to(dev)
net = nn.parallel.DistributedDataParallel(model) if ddp else model
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
train, test = genes.read_genbank("train.gb"), genes.read_genbank("test.gb")
g, start = torch.Generator().manual_seed(rank), time.perf_counter()
for step in range(1, args.steps + 1):
    pick = torch.randint(len(train), (args.batch,), generator=g).tolist()
    x, y, lengths = genes.batch([train[i] for i in pick], crop=args.crop, generator=g)
    loss = net(x.to(dev), lengths.to(dev), y.to(dev))
    opt.zero_grad(), loss.backward(), opt.step()
    if rank == 0 and (step % 20 == 0 or step == args.steps):
        ms = (time.perf_counter() - start) / step * 1e3
        nll = loss.item() / lengths.float().mean()
        print(f"step {step}: NLL per base {nll:.4f}, {ms:.0f} ms/step")
if rank == 0:
    with torch.no_grad():
        x, y, lengths = genes.batch(test)
        pred = model(x.to(dev), lengths.to(dev)).cpu()
        valid = torch.arange(y.shape[1]) < lengths.unsqueeze(1)
        acc = (pred == y)[valid].float().mean().item()
    print(f"test: {len(test)} genes, {int(valid.sum())} bases, per-base accuracy {acc:.3f}")
if ddp:
    torch.distributed.destroy_process_group()
