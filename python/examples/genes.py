"""The fly genes embedded in the repository (crates/semicrf-genes/data/, GenBank records of
the AUGUSTUS tutorial) as tensors: bases 0-4 (a, c, g, t, other) and a label per base,
0 intergenic, 1 coding exon, 2 intron (either strand)."""

import os
import re

import torch

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "semicrf-genes", "data")
LABELS = ("intergenic", "exon", "intron")


def read_genbank(name):
    """[(bases (L,) int64, labels (L,) int64)] of the records in DATA/name."""
    records, location, seq, state = [], "", [], None
    for line in open(os.path.join(DATA, name)):
        if line.startswith("     CDS"):
            location, state = line[21:].strip(), "cds"
        elif (
            state == "cds"
            and line.startswith(" " * 21)
            and location.count("(") > location.count(")")
        ):
            location += line.strip()
        elif line.startswith("ORIGIN"):
            seq, state = [], "origin"
        elif line.startswith("//"):
            bases = torch.tensor(["acgt".find(ch) % 5 for ch in "".join(seq)])
            labels = torch.zeros(len(bases), dtype=torch.long)
            exons = sorted(
                (int(a) - 1, int(b)) for a, b in re.findall(r"(\d+)\.\.>?(\d+)", location)
            )
            labels[exons[0][0] : exons[-1][1]] = 2
            for a, b in exons:
                labels[a:b] = 1
            records.append((bases, labels))
            state = None
        elif state == "origin":
            seq.append("".join(line.split()[1:]).lower())
    return records


def batch(records, crop=None, generator=None):
    """Padded (bases (B, T), labels (B, T), lengths (B,)); with `crop`, a random window of at
    most `crop` bases of each record."""
    parts = []
    for bases, labels in records:
        if crop is not None and len(bases) > crop:
            at = int(torch.randint(len(bases) - crop + 1, (1,), generator=generator))
            bases, labels = bases[at : at + crop], labels[at : at + crop]
        parts.append((bases, labels))
    lengths = torch.tensor([len(b) for b, _ in parts])
    x = torch.full((len(parts), int(lengths.max())), 4, dtype=torch.long)
    y = torch.zeros_like(x)
    for i, (b, lab) in enumerate(parts):
        x[i, : len(b)], y[i, : len(lab)] = b, lab
    return x, y, lengths
