//! The trace format and its parser.
//!
//! One event per line: `<time_ns> submit|complete [queue]`. `time_ns` is an unsigned integer
//! on any monotonic clock; times must not go backwards. `queue` defaults to 0 (at most
//! [`MAX_QUEUES`] queues). Blank lines and everything after `#` are ignored. Example:
//!
//! ```text
//! # time_ns  op        queue
//! 1000       submit    0
//! 21000      complete  0
//! ```

use thiserror::Error;

/// Largest queue index + 1 accepted in a trace.
pub const MAX_QUEUES: u16 = 1024;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The guest submitted a request.
    Submit,
    /// A request completed.
    Complete,
}

/// One trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    /// Time in nanoseconds.
    pub time_ns: u64,
    /// Submit or complete.
    pub op: Op,
    /// Queue index.
    pub queue: u16,
}

/// A malformed trace line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TraceError {
    /// Too few or too many fields.
    #[error("line {line}: expected `<time_ns> submit|complete [queue]`, found {fields} field(s)")]
    Fields {
        /// 1-based line number.
        line: usize,
        /// How many fields were found.
        fields: usize,
    },
    /// The time is not an unsigned integer.
    #[error("line {line}: `{text}` is not a time in nanoseconds")]
    Time {
        /// 1-based line number.
        line: usize,
        /// The offending text.
        text: String,
    },
    /// The operation is unknown.
    #[error("line {line}: unknown operation `{text}` (expected submit or complete)")]
    Op {
        /// 1-based line number.
        line: usize,
        /// The offending text.
        text: String,
    },
    /// The queue index is not a number below [`MAX_QUEUES`].
    #[error("line {line}: `{text}` is not a queue index below {MAX_QUEUES}")]
    Queue {
        /// 1-based line number.
        line: usize,
        /// The offending text.
        text: String,
    },
    /// Time went backwards.
    #[error("line {line}: time {time_ns} is before the previous event's {previous_ns}")]
    Backwards {
        /// 1-based line number.
        line: usize,
        /// This line's time.
        time_ns: u64,
        /// The previous event's time.
        previous_ns: u64,
    },
    /// A completion with nothing in flight on its queue.
    #[error("line {line}: complete on queue {queue} with no request in flight")]
    Unmatched {
        /// 1-based line number.
        line: usize,
        /// The queue.
        queue: u16,
    },
}

fn cut(s: &str) -> String {
    s.chars().take(40).collect()
}

fn parse_line(line: usize, text: &str) -> Result<Option<TraceEvent>, TraceError> {
    let body = text.split('#').next().unwrap_or("");
    let fields: Vec<&str> = body.split_whitespace().collect();
    if fields.is_empty() {
        return Ok(None);
    }
    if fields.len() < 2 || fields.len() > 3 {
        return Err(TraceError::Fields {
            line,
            fields: fields.len(),
        });
    }
    let time_ns = fields[0].parse().map_err(|_| TraceError::Time {
        line,
        text: cut(fields[0]),
    })?;
    let op = match fields[1] {
        "submit" => Op::Submit,
        "complete" => Op::Complete,
        other => {
            return Err(TraceError::Op {
                line,
                text: cut(other),
            })
        }
    };
    let queue = match fields.get(2) {
        None => 0,
        Some(q) => q
            .parse()
            .ok()
            .filter(|q| *q < MAX_QUEUES)
            .ok_or_else(|| TraceError::Queue { line, text: cut(q) })?,
    };
    Ok(Some(TraceEvent { time_ns, op, queue }))
}

/// Parse a whole trace, checking syntax, time order and that every completion has a request
/// in flight on its queue.
pub fn parse_trace(text: &str) -> Result<Vec<TraceEvent>, TraceError> {
    let mut events = Vec::new();
    let mut in_flight = vec![0u64; usize::from(MAX_QUEUES)];
    let mut previous_ns = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let Some(ev) = parse_line(line, raw)? else {
            continue;
        };
        if ev.time_ns < previous_ns {
            return Err(TraceError::Backwards {
                line,
                time_ns: ev.time_ns,
                previous_ns,
            });
        }
        previous_ns = ev.time_ns;
        let slot = &mut in_flight[usize::from(ev.queue)];
        match ev.op {
            Op::Submit => *slot += 1,
            Op::Complete if *slot == 0 => {
                return Err(TraceError::Unmatched {
                    line,
                    queue: ev.queue,
                })
            }
            Op::Complete => *slot -= 1,
        }
        events.push(ev);
    }
    Ok(events)
}

/// Write events in the trace format.
#[must_use]
pub fn format_trace(events: &[TraceEvent]) -> String {
    let mut out = String::from("# time_ns op queue\n");
    for e in events {
        let op = match e.op {
            Op::Submit => "submit",
            Op::Complete => "complete",
        };
        out.push_str(&format!("{} {} {}\n", e.time_ns, op, e.queue));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comments_defaults_and_queues() {
        let t = "# header\n\n100 submit\n200 submit 3 # note\n300 complete 3\n400 complete\n";
        let ev = parse_trace(t).unwrap_or_default();
        assert_eq!(ev.len(), 4);
        assert_eq!(
            ev[1],
            TraceEvent {
                time_ns: 200,
                op: Op::Submit,
                queue: 3
            }
        );
        assert_eq!(ev[3].queue, 0);
    }

    #[test]
    fn reports_line_numbers() {
        let cases = [
            (
                "1 submit\nx submit\n",
                TraceError::Time {
                    line: 2,
                    text: "x".into(),
                },
            ),
            (
                "1 submit\n2 finish\n",
                TraceError::Op {
                    line: 2,
                    text: "finish".into(),
                },
            ),
            ("1 submit 1 2\n", TraceError::Fields { line: 1, fields: 4 }),
            ("5\n", TraceError::Fields { line: 1, fields: 1 }),
            (
                "1 submit 5000\n",
                TraceError::Queue {
                    line: 1,
                    text: "5000".into(),
                },
            ),
            (
                "9 submit\n3 complete\n",
                TraceError::Backwards {
                    line: 2,
                    time_ns: 3,
                    previous_ns: 9,
                },
            ),
            (
                "1 submit 1\n2 complete 0\n",
                TraceError::Unmatched { line: 2, queue: 0 },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_trace(text), Err(want), "{text:?}");
        }
    }

    #[test]
    fn format_round_trips() {
        let t = "10 submit 0\n20 complete 0\n";
        let ev = parse_trace(t).unwrap_or_default();
        assert_eq!(parse_trace(&format_trace(&ev)), Ok(ev));
    }
}
