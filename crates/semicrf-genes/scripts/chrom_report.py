#!/usr/bin/env python3
"""Gene-structure statistics of predicted or annotated genes, as Markdown tables.

Usage:
    chrom_report.py [--fasta SEQ.fa] [--short N] NAME=FILE [NAME=FILE ...]

Each NAME=FILE is one column of the tables. FILE is read by its content:

- GFF3 as `semicrf-genes predict` writes it: `CDS` lines grouped by `Parent=`;
- GFF as SNAP writes it (`snap HMM SEQ.fa -gff`): `Einit`/`Exon`/`Eterm`/`Esngl` lines
  grouped by column 9;
- GenBank (starts with `LOCUS`): the `CDS` joins of its features, one gene each.

Coordinates are taken as written (1-based, inclusive), except that where the sequence is
known (`--fasta`, or GenBank input) a gene whose coding sequence ends just before a stop
codon is extended over it, so that every column counts the stop codon in its last exon.
Exons are classed by their place in their gene in transcription order (single, initial,
internal, terminal); introns are the gaps between consecutive exons of a gene.

Where the sequence is known, the summary also counts the genes whose spliced coding sequence
does not start with ATG, whose start codon is split by an intron, that do not end in a stop
codon, or that hold an in-frame stop codon before their last codon (and of these, one split
by an intron, which a check of each exon's own bases does not see). Then the exons of the
first column shorter than `--short` bases (default 10) are listed with the introns on either
side, their phases (coding bases before the intron, modulo 3) and notes.

Example (the figures in docs/genes-chr2R.md):
    chrom_report.py --fasta chr2R.fa ours=chr2R.ours.gff3 snap=snap.gff train=genes.gb.train

Standard library only.
"""

import re
import sys
from collections import OrderedDict

EXON_BINS = [(0, 10, "<10"), (10, 30, "10–29"), (30, 100, "30–99"), (100, 300, "100–299"),
             (300, 1000, "300–999"), (1000, None, "≥1000")]
INTRON_BINS = [(0, 40, "<40"), (40, 60, "40–59"), (60, 100, "60–99"), (100, 1000, "100–999"),
               (1000, 10000, "1,000–9,999"), (10000, None, "≥10,000")]
CLASSES = ["single", "initial", "internal", "terminal"]
STOPS = {"TAA", "TAG", "TGA"}
COMPLEMENT = str.maketrans("ACGTNacgtn", "TGCANtgcan")


def fail(msg):
    sys.stderr.write(f"chrom_report.py: {msg}\n")
    sys.exit(2)


class Gene:
    """One gene: sequence name, strand, sorted list of (start, end), 1-based inclusive."""

    def __init__(self, seq, strand, exons, name):
        self.seq, self.strand, self.name = seq, strand, name
        self.exons = sorted(exons)

    def in_order(self):
        """Exons in transcription order."""
        return self.exons if self.strand == "+" else self.exons[::-1]

    def classed(self):
        """(class, (start, end)) in transcription order."""
        ex = self.in_order()
        if len(ex) == 1:
            return [("single", ex[0])]
        return [("initial" if i == 0 else "terminal" if i == len(ex) - 1 else "internal", e)
                for i, e in enumerate(ex)]

    def introns(self):
        return [b[0] - a[1] - 1 for a, b in zip(self.exons, self.exons[1:])]


def read_gff(path, lines):
    groups = OrderedDict()
    snap_types = {"Einit", "Exon", "Eterm", "Esngl"}
    for n, line in enumerate(lines, 1):
        if line.startswith("#") or not line.strip():
            continue
        f = line.rstrip("\n").split("\t")
        if len(f) < 9:
            fail(f"{path}:{n}: expected 9 tab-separated columns")
        if f[2] == "CDS":
            m = re.search(r"(?:^|;)Parent=([^;]+)", f[8]) or re.search(r"(?:^|;)ID=([^;]+)", f[8])
            key = m.group(1) if m else f[8]
        elif f[2] in snap_types:
            key = f[8].strip()
        else:
            continue
        try:
            a, b = int(f[3]), int(f[4])
        except ValueError:
            fail(f"{path}:{n}: start or end is not a number")
        if a < 1 or b < a or f[6] not in "+-" or len(f[6]) != 1:
            fail(f"{path}:{n}: bad coordinates or strand")
        k = (f[0], key)
        if k not in groups:
            groups[k] = [f[6], []]
        elif groups[k][0] != f[6]:
            fail(f"{path}:{n}: gene {key} mixes strands")
        groups[k][1].append((a, b))
    return [Gene(seq, strand, ex, key) for (seq, key), (strand, ex) in groups.items()]


SEQS = {}


def read_genbank(path, text):
    """The CDS genes of a GenBank file; its sequences go to SEQS for the short-exon list."""
    genes = []
    for rec in text.split("\n//"):
        m = re.search(r"^LOCUS\s+(\S+)", rec, re.M)
        if not m:
            continue
        locus = m.group(1)
        o = rec.find("\nORIGIN")
        if o >= 0:
            SEQS[locus] = re.sub(r"[^A-Za-z]", "", rec[o + 7:]).upper()
        # A CDS location runs from the feature key over its continuation lines up to the
        # first qualifier ("/...") or the next feature key.
        for cm in re.finditer(r"^ {5}CDS {13}(.*?)(?=^ {21}/|^ {5}\S|^\S)", rec, re.M | re.S):
            loc = re.sub(r"\s+", "", cm.group(1))
            spans = [(int(a), int(b)) for a, b in re.findall(r"<?(\d+)\.\.>?(\d+)", loc)]
            if not spans:
                fail(f"{path}: {locus}: unsupported CDS location {loc}")
            strand = "-" if loc.startswith("complement") else "+"
            genes.append(Gene(locus, strand, spans, f"{locus}:{len(genes)}"))
    return genes


def read_genes(path):
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if text.startswith("LOCUS"):
        return read_genbank(path, text)
    return read_gff(path, text.splitlines())


def read_fasta(path):
    seqs, name, parts = {}, None, []
    with open(path) as fh:
        for line in fh:
            if line.startswith(">"):
                if name is not None:
                    seqs[name] = "".join(parts).upper()
                name, parts = line[1:].split()[0], []
            else:
                parts.append(line.strip())
    if name is not None:
        seqs[name] = "".join(parts).upper()
    return seqs


def binned(values, bins):
    counts = [0] * len(bins)
    for v in values:
        for i, (lo, hi, _) in enumerate(bins):
            if v >= lo and (hi is None or v < hi):
                counts[i] += 1
                break
    return counts


def cell(count, total):
    return f"{count:,} ({100.0 * count / total:.1f}%)" if total else "0"


def median(xs):
    xs = sorted(xs)
    if not xs:
        return "–"
    n = len(xs)
    return str(xs[n // 2]) if n % 2 else f"{(xs[n // 2 - 1] + xs[n // 2]) / 2:g}"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def spliced(seq, gene, exons):
    """The coding sequence of `exons` (1-based inclusive, sorted) in transcription order."""
    s = "".join(seq[a - 1:b] for a, b in exons)
    return s if gene.strand == "+" else s.translate(COMPLEMENT)[::-1]


def first_stop(cds):
    """0-based coding position of the first in-frame stop codon, or None."""
    for i in range(0, len(cds) - 2, 3):
        if cds[i:i + 3] in STOPS:
            return i
    return None


def checks(g, seqs):
    """Facts about a gene's spliced coding sequence, or None when its sequence is unknown:
    (starts with ATG, ends with a stop codon, an in-frame stop before the last codon,
    of these one whose codon spans a splice junction, the start codon spans a junction)."""
    s = seqs.get(g.seq)
    if s is None or g.exons[-1][1] > len(s):
        return None
    cds = spliced(s, g, g.exons)
    # Coding positions where an exon ends, in transcription order.
    ends, n = set(), 0
    for a, b in g.in_order():
        n += b - a + 1
        ends.add(n)
    stop = first_stop(cds)
    early = stop is not None and stop < len(cds) - 3
    across = early and (stop + 1 in ends or stop + 2 in ends)
    return (cds[:3] == "ATG", cds[-3:] in STOPS, early, across,
            1 in ends or 2 in ends)


def summary(sets, seqs):
    names = list(sets)
    rows = []
    stat = {n: {"exons": [(c, e[1] - e[0] + 1) for g in gs for c, e in g.classed()],
                "introns": [i for g in gs for i in g.introns()]} for n, gs in sets.items()}
    rows.append(["genes"] + [f"{len(sets[n]):,}" for n in names])
    rows.append(["coding exons"] + [f"{len(stat[n]['exons']):,}" for n in names])
    rows.append(["exons per gene"] + [f"{len(stat[n]['exons']) / max(1, len(sets[n])):.2f}"
                                      for n in names])
    rows.append(["single-exon genes"] + [cell(sum(len(g.exons) == 1 for g in sets[n]),
                                              len(sets[n])) for n in names])
    rows.append(["coding bases"] + [f"{sum(l for _, l in stat[n]['exons']):,}" for n in names])
    rows.append(["median exon length"] + [median([l for _, l in stat[n]["exons"]])
                                          for n in names])
    rows.append(["introns"] + [f"{len(stat[n]['introns']):,}" for n in names])
    rows.append(["median intron length"] + [median(stat[n]["introns"]) for n in names])
    rows.append(["introns under 4 bases (GT…AG overlaps the exons)"]
                + [f"{sum(i < 4 for i in stat[n]['introns']):,}" for n in names])
    facts = {n: [c for c in (checks(g, seqs) for g in sets[n]) if c is not None] for n in names}
    if any(facts.values()):
        labels = ["spliced start codon not ATG", "start codon split by an intron",
                  "last codon not a stop", "in-frame stop before the last codon",
                  "… of which across a splice junction"]
        picks = [lambda c: not c[0], lambda c: c[4], lambda c: not c[1], lambda c: c[2],
                 lambda c: c[3]]
        for lab, pick in zip(labels, picks):
            rows.append([f"genes: {lab}"] + [f"{sum(map(pick, facts[n])):,}" if facts[n]
                                             else "–" for n in names])
    print(table([""] + names, rows))
    print()
    print("Coding exon lengths (bases, stop codon included), count and share of each column:\n")
    counts = {n: binned([l for _, l in stat[n]["exons"]], EXON_BINS) for n in names}
    print(table(["length"] + names,
                [[lab] + [cell(counts[n][i], len(stat[n]["exons"])) for n in names]
                 for i, (_, _, lab) in enumerate(EXON_BINS)]))
    print()
    print("Exons shorter than 10 / 10–29 bases, by exon class (of all exons of that class):\n")
    rows = []
    for c in CLASSES:
        row = [c]
        for n in names:
            ls = [l for k, l in stat[n]["exons"] if k == c]
            row.append(f"{sum(l < 10 for l in ls):,} / {sum(10 <= l < 30 for l in ls):,}"
                       f" of {len(ls):,}")
        rows.append(row)
    print(table(["class"] + names, rows))
    print()
    print("Intron lengths (bases):\n")
    counts = {n: binned(stat[n]["introns"], INTRON_BINS) for n in names}
    print(table(["length"] + names,
                [[lab] + [cell(counts[n][i], len(stat[n]["introns"])) for n in names]
                 for i, (_, _, lab) in enumerate(INTRON_BINS)]))
    print()


def short_exons(name, genes, seqs, limit):
    found = []
    for g in genes:
        if g.seq not in seqs or g.exons[-1][1] > len(seqs[g.seq]):
            continue
        for k, (c, e) in enumerate(g.classed()):
            if e[1] - e[0] + 1 < limit:
                found.append((g, k, c, e))
    print(f"Exons of `{name}` shorter than {limit} bases: {len(found):,}.\n")
    if not found:
        return
    rows, adjacent, near_long, flagged = [], [], 0, {}
    for g, k, c, e in found:
        length = e[1] - e[0] + 1
        gi = g.introns()
        i = g.exons.index(e)
        left = gi[i - 1] if i > 0 else None
        right = gi[i] if i < len(gi) else None
        up, down = (left, right) if g.strand == "+" else (right, left)
        beside = [x for x in (up, down) if x is not None]
        adjacent += beside
        near_long += any(x >= 1000 for x in beside)
        ck = checks(g, seqs)
        notes = []
        if c == "initial" and length < 3:
            notes.append("start codon split by the intron")
        if c == "terminal" and length < 6:
            notes.append("fewer than 3 coding bases")
        if ck[2]:
            notes.append("gene has an in-frame stop" + (" across a junction" if ck[3] else ""))
        for nt in notes:
            flagged[nt] = flagged.get(nt, 0) + 1
        before = sum(b - a + 1 for a, b in g.in_order()[:k])
        phases = (str(before % 3) if up is not None else "–") + " / " + (
            str((before + length) % 3) if down is not None else "–")
        rows.append([f"{g.seq}:{e[0]:,}–{e[1]:,} {g.strand}", c, str(length),
                     f"{up:,}" if up is not None else "–",
                     f"{down:,}" if down is not None else "–",
                     phases, "; ".join(notes) or "–"])
    by_class = {c: [int(r[2]) for r in rows if r[1] == c] for c in CLASSES}
    print(table(["class", "count", "lengths (count)"],
                [[c, str(len(v)), ", ".join(f"{n}: {v.count(n)}" for n in sorted(set(v)))]
                 for c, v in by_class.items() if v]))
    print()
    print(f"- median length of the introns beside them: {median(adjacent)} "
          f"(all introns of `{name}`: {median([i for g in genes for i in g.introns()])})")
    print(f"- beside an intron of 1,000 bases or more: {near_long}")
    for note, v in sorted(flagged.items()):
        print(f"- {note}: {v}")
    print()
    print(table(["exon", "class", "length", "intron before", "intron after",
                 "intron phases", "notes"], rows))
    print()


def add_stops(genes, seqs):
    """Extends each gene whose coding sequence ends just before a stop codon over that codon
    (GenBank CDS joins of the AUGUSTUS tutorial leave it out; GFF3 of `predict` includes it).
    Returns the number of genes extended."""
    n = 0
    for g in genes:
        s = seqs.get(g.seq)
        if s is None or g.exons[-1][1] > len(s) or not g.exons:
            continue
        if spliced(s, g, g.exons)[-3:] in STOPS:
            continue
        if g.strand == "+":
            a, b = g.exons[-1]
            if s[b:b + 3] in STOPS:
                g.exons[-1] = (a, b + 3)
                n += 1
        else:
            a, b = g.exons[0]
            if a > 3 and s[a - 4:a - 1].translate(COMPLEMENT)[::-1] in STOPS:
                g.exons[0] = (a - 3, b)
                n += 1
    return n


def main(argv):
    fasta, limit, sets = None, 10, OrderedDict()
    args = list(argv)
    while args:
        a = args.pop(0)
        if a in ("-h", "--help"):
            print(__doc__)
            return
        if a in ("--fasta", "--short"):
            if not args:
                fail(f"{a} needs a value")
            v = args.pop(0)
            if a == "--fasta":
                fasta = v
            else:
                try:
                    limit = int(v)
                except ValueError:
                    fail("--short needs a number")
            continue
        if "=" not in a:
            fail(f"expected NAME=FILE, got {a!r} (see --help)")
        n, path = a.split("=", 1)
        sets[n] = read_genes(path)
    if not sets:
        fail("no NAME=FILE given (see --help)")
    seqs = dict(SEQS)
    if fasta:
        try:
            seqs.update(read_fasta(fasta))
        except OSError as e:
            fail(f"{fasta}: {e.strerror}")
    for n, gs in sets.items():
        k = add_stops(gs, seqs)
        if k:
            print(f"`{n}`: {k} of {len(gs)} genes end just before a stop codon; "
                  "their last exon is extended over it.\n")
    summary(sets, seqs)
    if seqs:
        first = next(iter(sets))
        short_exons(first, sets[first], seqs, limit)


if __name__ == "__main__":
    main(sys.argv[1:])
