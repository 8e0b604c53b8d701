//! The JSON-lines results file of a sweep: one [`SweepPoint`] per line, appended and
//! flushed as each result arrives. Opening an existing file resumes it: its points are
//! kept and their jobs skipped. A last line cut by an interruption (no newline) is
//! dropped; a point of another scenario or other overrides (its digest) is an error.

use super::{Result, SweepError, SweepPoint};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// An open results file.
#[derive(Debug)]
pub struct ResultsFile {
    path: PathBuf,
    file: File,
    done: BTreeMap<String, SweepPoint>,
}

impl ResultsFile {
    /// Open (or create) `path` for the sweep whose jobs have `digest`, reading the points it
    /// already holds.
    ///
    /// # Errors
    /// [`SweepError::Io`], or [`SweepError::Results`] for a malformed line or a point of
    /// another sweep.
    pub fn open(path: &Path, digest: &str) -> Result<Self> {
        let io = |source| SweepError::Io {
            path: path.display().to_string(),
            source,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io(e)),
        };
        // Only newline-terminated lines are complete; a cut last line is rewritten.
        let complete = text.rfind('\n').map_or(0, |i| i + 1);
        let mut done = BTreeMap::new();
        for (n, line) in text[..complete].lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad = |why: String| SweepError::Results {
                path: path.display().to_string(),
                line: n + 1,
                why,
            };
            let p: SweepPoint = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
            if p.digest != digest {
                return Err(bad(format!(
                    "a point of another scenario or other --set/--costs (digest {} instead of \
                     {digest}); use another --out file",
                    p.digest
                )));
            }
            done.insert(p.key(), p);
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        if complete < text.len() {
            file.set_len(complete as u64).map_err(io)?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            done,
        })
    }

    /// Whether a point with this key is already in the file.
    #[must_use]
    pub fn has(&self, key: &str) -> bool {
        self.done.contains_key(key)
    }

    /// How many points the file holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.done.len()
    }

    /// Whether the file holds no point.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }

    /// Append `p` as one line and flush it to the file.
    ///
    /// # Errors
    /// [`SweepError::Io`].
    pub fn append(&mut self, p: &SweepPoint) -> Result<()> {
        let mut line = serde_json::to_string(p).map_err(|e| SweepError::Io {
            path: self.path.display().to_string(),
            source: e.into(),
        })?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|source| SweepError::Io {
                path: self.path.display().to_string(),
                source,
            })?;
        self.done.insert(p.key(), p.clone());
        Ok(())
    }

    /// The point with this key, if the file holds it.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&SweepPoint> {
        self.done.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(run: &str, digest: &str) -> SweepPoint {
        SweepPoint {
            point: vec!["a=1".into()],
            run: run.into(),
            seed: 7,
            digest: digest.into(),
            values: [("x".to_string(), 0.1 + 0.2), ("y".to_string(), f64::NAN)].into(),
        }
    }

    #[test]
    fn resumes_drops_a_cut_line_and_refuses_another_sweep() {
        let dir = std::env::temp_dir().join(format!("vmirq-results-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("r.jsonl");
        let _ = std::fs::remove_file(&path);
        let mut f = ResultsFile::open(&path, "d1").expect("new file");
        assert!(f.is_empty());
        f.append(&point("a", "d1")).expect("append");
        drop(f);
        // An interruption in the middle of the second line.
        let mut raw = OpenOptions::new().append(true).open(&path).expect("open");
        raw.write_all(br#"{"point":["a=1"],"run":"b""#)
            .expect("write");
        drop(raw);
        let mut f = ResultsFile::open(&path, "d1").expect("resume");
        assert_eq!(f.len(), 1);
        let p = point("a", "d1");
        let got = f.get(&p.key()).expect("kept");
        assert_eq!(got.values["x"].to_bits(), (0.1f64 + 0.2).to_bits());
        assert!(got.values["y"].is_nan());
        f.append(&point("b", "d1")).expect("append");
        drop(f);
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(matches!(
            ResultsFile::open(&path, "d2"),
            Err(SweepError::Results { line: 1, .. })
        ));
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
