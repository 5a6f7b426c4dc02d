//! Annotated sequences: GenBank and FASTA input, GFF3 output.

use std::io::{BufRead, Write};
use std::path::Path;

use gb_io::seq::Location;

use crate::Error;
use crate::dna;

/// A DNA strand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Strand {
    /// The given strand, read left to right.
    Plus,
    /// The reverse complement, read right to left.
    Minus,
}

impl Strand {
    /// `+` or `-`, as GFF3 writes it.
    pub fn sign(self) -> char {
        match self {
            Strand::Plus => '+',
            Strand::Minus => '-',
        }
    }
}

/// A protein-coding gene: its coding exons, as the GenBank `CDS` feature gives them
/// (0-based, inclusive, left to right, **without** the stop codon).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gene {
    /// Its strand.
    pub strand: Strand,
    /// `(first, last)` base of every coding exon, left to right, stop codon excluded.
    pub exons: Vec<(usize, usize)>,
}

impl Gene {
    /// The exons as gene finders report and score them: the terminal exon (in reading order)
    /// extended by the 3 bases of the stop codon.
    pub fn exons_with_stop(&self) -> Vec<(usize, usize)> {
        let mut e = self.exons.clone();
        match self.strand {
            Strand::Plus => {
                if let Some(last) = e.last_mut() {
                    last.1 += 3;
                }
            }
            Strand::Minus => {
                if let Some(first) = e.first_mut() {
                    first.0 = first.0.saturating_sub(3);
                }
            }
        }
        e
    }

    /// The leftmost and rightmost bases of the coding sequence, stop codon included.
    pub fn span(&self) -> (usize, usize) {
        let e = self.exons_with_stop();
        (e[0].0, e[e.len() - 1].1)
    }
}

/// A named sequence (codes of [`dna::code`]) and its annotated genes.
#[derive(Clone, Debug)]
pub struct Record {
    /// Its name (the GenBank `LOCUS` name or the FASTA name).
    pub name: String,
    /// Its bases, as codes.
    pub seq: Vec<u8>,
    /// Its genes, left to right (empty for FASTA).
    pub genes: Vec<Gene>,
}

/// Reads every record of a GenBank file: its sequence and the genes of its `CDS` features.
pub fn read_genbank(path: &Path) -> Result<Vec<Record>, Error> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    parse_genbank(std::io::BufReader::new(file), &path.display().to_string())
}

/// Reads GenBank records from `reader`; `source` names it in errors.
///
/// Records are parsed one at a time with gb-io, so that an error names its record and the
/// line it starts on. A minimal `LOCUS` line (`LOCUS name 2899 bp DNA`, as AUGUSTUS writes
/// it) is completed with the default topology, division and date first, and sequence lines
/// that hold only a position are dropped.
pub fn parse_genbank(mut reader: impl std::io::Read, source: &str) -> Result<Vec<Record>, Error> {
    let mut text = String::new();
    reader.read_to_string(&mut text).map_err(|e| Error::Input {
        file: source.to_string(),
        what: format!("not text: {e}"),
    })?;
    let mut out: Vec<Record> = Vec::new();
    let mut chunk = String::new();
    let (mut first_line, mut line_no) = (1usize, 0usize);
    let mut in_origin = false;
    for line in text.lines() {
        line_no += 1;
        if chunk.is_empty() && line.trim().is_empty() {
            first_line = line_no + 1;
            continue;
        }
        in_origin |= line.starts_with("ORIGIN");
        // A sequence line with a position and no bases (AUGUSTUS writes one after a
        // sequence whose length is a multiple of 60 plus one) holds nothing.
        let t = line.trim();
        if in_origin && !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        chunk.push_str(&complete_locus(line));
        chunk.push('\n');
        if line.trim_end() == "//" {
            out.push(parse_record(&chunk, out.len() + 1, first_line, source)?);
            chunk.clear();
            in_origin = false;
            first_line = line_no + 1;
        }
    }
    if !chunk.trim().is_empty() {
        return Err(Error::Input {
            file: source.to_string(),
            what: format!(
                "GenBank record {} (line {first_line}) does not end with a '//' line",
                out.len() + 1
            ),
        });
    }
    if out.is_empty() {
        return Err(Error::Input {
            file: source.to_string(),
            what: "no GenBank record (a record starts with LOCUS and ends with //)".into(),
        });
    }
    Ok(out)
}

/// A `LOCUS` line of only name, length, `bp` and molecule, completed.
fn complete_locus(line: &str) -> std::borrow::Cow<'_, str> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() == 5 && f[0] == "LOCUS" && f[3] == "bp" {
        format!(
            "LOCUS       {} {} bp {} linear UNK 01-JAN-1980",
            f[1], f[2], f[4]
        )
        .into()
    } else {
        line.into()
    }
}

fn parse_record(text: &str, n: usize, line: usize, source: &str) -> Result<Record, Error> {
    let locus = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("LOCUS"))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_string);
    let name = locus.clone().unwrap_or_else(|| format!("record{n}"));
    let bad = |what: String| Error::Input {
        file: source.to_string(),
        what: format!("GenBank record {n} ({name:?}, line {line}): {what}"),
    };
    if locus.is_none() {
        return Err(bad("does not start with a LOCUS line".into()));
    }
    let mut seqs = gb_io::reader::parse_slice(text.as_bytes()).map_err(|e| {
        let msg: String = e.to_string().chars().take(120).collect();
        bad(format!("not valid GenBank ({msg})"))
    })?;
    if seqs.len() != 1 {
        return Err(bad(format!("read as {} records", seqs.len())));
    }
    let seq = seqs.remove(0);
    if seq.seq.is_empty() {
        return Err(bad("no sequence (ORIGIN section missing or empty)".into()));
    }
    if let Some(i) = seq.seq.iter().position(|b| !b.is_ascii_alphabetic()) {
        return Err(bad(format!(
            "character {:?} at base {} is not a nucleotide letter",
            seq.seq[i] as char,
            i + 1
        )));
    }
    let len = seq.seq.len();
    let mut genes = Vec::new();
    for f in seq.features.iter().filter(|f| f.kind == "CDS") {
        genes.push(gene_of(&f.location, len).map_err(&bad)?);
    }
    genes.sort_by_key(|g| g.span());
    for w in genes.windows(2) {
        if w[1].span().0 <= w[0].span().1 {
            return Err(bad(format!(
                "CDS features overlap at bases {}..{} and {}..{}",
                w[0].span().0 + 1,
                w[0].span().1 + 1,
                w[1].span().0 + 1,
                w[1].span().1 + 1
            )));
        }
    }
    Ok(Record {
        name,
        seq: dna::encode(&seq.seq),
        genes,
    })
}

/// The gene of a `CDS` location: `a..b`, `join(...)`, `complement(join(...))` or
/// `join(complement(...), ...)`; partial (`<`, `>`) and remote locations are refused.
fn gene_of(loc: &Location, len: usize) -> Result<Gene, String> {
    fn ranges(l: &Location, minus: bool, out: &mut Vec<(i64, i64, bool)>) -> Result<(), String> {
        match l {
            Location::Range((a, before), (b, after)) => {
                if before.0 || after.0 {
                    return Err(format!(
                        "partial CDS {} (only complete genes are supported)",
                        l.to_gb_format()
                    ));
                }
                out.push((*a, *b, minus));
                Ok(())
            }
            Location::Complement(inner) => ranges(inner, !minus, out),
            Location::Join(parts) | Location::Order(parts) => {
                parts.iter().try_for_each(|p| ranges(p, minus, out))
            }
            other => Err(format!("unsupported CDS location {}", other.to_gb_format())),
        }
    }
    let mut parts = Vec::new();
    ranges(loc, false, &mut parts)?;
    let minus = parts.first().is_some_and(|p| p.2);
    if parts.iter().any(|p| p.2 != minus) {
        return Err(format!("CDS {} mixes strands", loc.to_gb_format()));
    }
    let mut exons: Vec<(usize, usize)> = Vec::new();
    for &(a, b, _) in &parts {
        if a < 0 || b <= a || b as usize > len {
            return Err(format!(
                "CDS {} lies outside the sequence of {len} bases",
                loc.to_gb_format()
            ));
        }
        exons.push((a as usize, b as usize - 1));
    }
    exons.sort();
    if exons.windows(2).any(|w| w[1].0 <= w[0].1 + 1) {
        return Err(format!(
            "CDS {} has overlapping or touching exons",
            loc.to_gb_format()
        ));
    }
    let strand = if minus { Strand::Minus } else { Strand::Plus };
    let gene = Gene { strand, exons };
    let (lo, hi) = gene.span();
    if (minus && gene.exons[0].0 < 3) || hi >= len || lo > hi {
        return Err(format!(
            "CDS {}: its stop codon lies outside the sequence",
            loc.to_gb_format()
        ));
    }
    Ok(gene)
}

/// Reads every record of a FASTA file (no genes).
pub fn read_fasta(path: &Path) -> Result<Vec<Record>, Error> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    parse_fasta(std::io::BufReader::new(file), &path.display().to_string())
}

/// Reads FASTA records from `reader`; `source` names it in errors.
pub fn parse_fasta(reader: impl BufRead, source: &str) -> Result<Vec<Record>, Error> {
    let mut r = noodles_fasta::io::Reader::new(reader);
    let mut out: Vec<Record> = Vec::new();
    for (n, rec) in r.records().enumerate() {
        let rec = rec.map_err(|e| Error::Input {
            file: source.to_string(),
            what: format!("FASTA record {}: {e}", n + 1),
        })?;
        let name = String::from_utf8_lossy(rec.name()).into_owned();
        let seq: &[u8] = rec.sequence().as_ref();
        if seq.is_empty() {
            return Err(Error::Input {
                file: source.to_string(),
                what: format!("FASTA record {} ({name:?}) has no sequence", n + 1),
            });
        }
        if let Some(i) = seq
            .iter()
            .position(|b| !b.is_ascii_alphabetic() && *b != b'-')
        {
            return Err(Error::Input {
                file: source.to_string(),
                what: format!(
                    "FASTA record {} ({name:?}): character {:?} at base {} is not a nucleotide letter",
                    n + 1,
                    seq[i] as char,
                    i + 1
                ),
            });
        }
        out.push(Record {
            name,
            seq: dna::encode(seq),
            genes: Vec::new(),
        });
    }
    if out.is_empty() {
        return Err(Error::Input {
            file: source.to_string(),
            what: "no FASTA record (a record starts with '>')".into(),
        });
    }
    Ok(out)
}

/// Reads a GenBank or a FASTA file, told apart by its first non-blank character.
pub fn read_any(path: &Path) -> Result<Vec<Record>, Error> {
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        Some(b'>') => parse_fasta(&text[..], &path.display().to_string()),
        Some(b'L') => parse_genbank(&text[..], &path.display().to_string()),
        _ => Err(Error::Input {
            file: path.display().to_string(),
            what: "neither GenBank (starts with LOCUS) nor FASTA (starts with '>')".into(),
        }),
    }
}

/// Writes genes as GFF3: one `CDS` line per coding exon, 1-based inclusive coordinates, the
/// terminal exon including the stop codon, column 1 the record name, with the exon's phase.
pub fn write_gff3(
    out: &mut impl Write,
    predictions: &[(String, Vec<Gene>)],
) -> std::io::Result<()> {
    writeln!(out, "##gff-version 3")?;
    let mut id = 0;
    for (name, genes) in predictions {
        for g in genes {
            id += 1;
            let exons = g.exons_with_stop();
            // Phase: bases to skip at the exon's reading start to reach a codon start.
            let order: Vec<usize> = match g.strand {
                Strand::Plus => (0..exons.len()).collect(),
                Strand::Minus => (0..exons.len()).rev().collect(),
            };
            let mut coding = 0usize;
            let mut phase = vec![0; exons.len()];
            for &i in &order {
                phase[i] = (3 - coding % 3) % 3;
                coding += exons[i].1 - exons[i].0 + 1;
            }
            for (i, &(a, b)) in exons.iter().enumerate() {
                writeln!(
                    out,
                    "{name}\tsemicrf-genes\tCDS\t{}\t{}\t.\t{}\t{}\tID=cds{id};Parent=gene{id}",
                    a + 1,
                    b + 1,
                    g.strand.sign(),
                    phase[i]
                )?;
            }
        }
    }
    Ok(())
}

/// Reads the `CDS` lines of a GFF3 file (as [`write_gff3`] writes them) into genes per
/// sequence name, grouped by their `Parent` (or `ID`) attribute; coordinates include the
/// stop codon, as GFF3 does.
pub fn read_gff3_exons(path: &Path) -> Result<Vec<crate::eval::Scored>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut groups: Vec<crate::eval::Scored> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let bad = |what: &str| Error::Input {
            file: path.display().to_string(),
            what: format!("line {}: {what}", n + 1),
        };
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 9 {
            return Err(bad("expected 9 tab-separated columns"));
        }
        if f[2] != "CDS" {
            continue;
        }
        let a: usize = f[3].parse().map_err(|_| bad("start is not a number"))?;
        let b: usize = f[4].parse().map_err(|_| bad("end is not a number"))?;
        if a == 0 || b < a {
            return Err(bad("start must be >= 1 and <= end"));
        }
        let strand = match f[6] {
            "+" => Strand::Plus,
            "-" => Strand::Minus,
            _ => return Err(bad("strand must be + or -")),
        };
        let parent = f[8]
            .split(';')
            .find_map(|kv| {
                kv.strip_prefix("Parent=")
                    .or_else(|| kv.strip_prefix("ID="))
            })
            .unwrap_or("")
            .to_string();
        let key = (f[0].to_string(), parent);
        let i = *index.entry(key).or_insert_with(|| {
            groups.push((f[0].to_string(), strand, Vec::new()));
            groups.len() - 1
        });
        groups[i].2.push((a - 1, b - 1));
    }
    for g in &mut groups {
        g.2.sort();
    }
    Ok(groups)
}
