//! fio's JSON output (`--output-format=json`) as far as the tests and the bench need it: per
//! job, its error and the I/Os, bytes and IOPS of each direction.

use serde::Deserialize;

/// One direction of a job.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
pub struct Direction {
    /// Bytes transferred.
    #[serde(default)]
    pub io_bytes: u64,
    /// I/Os completed.
    #[serde(default)]
    pub total_ios: u64,
    /// I/Os per second over the job's runtime.
    #[serde(default)]
    pub iops: f64,
}

/// One job's result.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Job {
    /// `--name`.
    pub jobname: String,
    /// fio's error code (0: none; verify failures set it).
    pub error: i64,
    /// Reads (verify reads count here).
    pub read: Direction,
    /// Writes.
    pub write: Direction,
}

impl Job {
    /// Reads plus writes.
    #[must_use]
    pub fn total_ios(&self) -> u64 {
        self.read.total_ios.saturating_add(self.write.total_ios)
    }

    /// Read plus write IOPS.
    #[must_use]
    pub fn iops(&self) -> f64 {
        self.read.iops + self.write.iops
    }
}

#[derive(Deserialize)]
struct Output {
    jobs: Vec<Job>,
}

/// The jobs in `text`: fio's JSON document, possibly after lines of warnings.
///
/// # Errors
/// No JSON object in `text`, or not fio's shape.
pub fn parse(text: &str) -> Result<Vec<Job>, serde_json::Error> {
    let start = text.find('{').unwrap_or(0);
    let end = text.rfind('}').map_or(text.len(), |e| e + 1);
    let out: Output = serde_json::from_str(text.get(start..end).unwrap_or(""))?;
    Ok(out.jobs)
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_jobs_after_warnings() {
        let text = "fio: some warning\n{\"fio version\":\"fio-3.33\",\"jobs\":[{\"jobname\":\"a\",\
                    \"error\":0,\"read\":{\"io_bytes\":4096,\"total_ios\":1,\"iops\":10.5},\
                    \"write\":{\"io_bytes\":0,\"total_ios\":0,\"iops\":0.0}}]}\n";
        let jobs = super::parse(text).expect("parse");
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].jobname, "a");
        assert_eq!(jobs[0].total_ios(), 1);
        assert!((jobs[0].iops() - 10.5).abs() < 1e-9);
        assert!(super::parse("no json").is_err());
    }
}
