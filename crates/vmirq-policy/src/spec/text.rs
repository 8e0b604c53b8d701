//! [`Text`]: a short copy of user input for error messages, without allocation.

use core::fmt;

const CAP: usize = 40;

/// Up to 40 bytes of user input, cut at a character boundary (marked with `…` when cut).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Text {
    buf: [u8; CAP],
    len: u8,
    cut: bool,
}

impl Text {
    /// Copy (a prefix of) `s`.
    #[must_use]
    pub fn new(s: &str) -> Self {
        let mut end = s.len().min(CAP);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut buf = [0; CAP];
        buf[..end].copy_from_slice(&s.as_bytes()[..end]);
        Self {
            buf,
            len: u8::try_from(end).unwrap_or(0),
            cut: end < s.len(),
        }
    }

    /// The copied text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("")
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        if self.cut {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_at_char_boundary() {
        let long = "ééééééééééééééééééééééééé"; // 2 bytes each
        let t = Text::new(long);
        assert_eq!(t.as_str().len(), 40);
        let short = Text::new("abc");
        assert_eq!(short.as_str(), "abc");
        let odd = Text::new("aéééééééééééééééééééééééé");
        assert_eq!(odd.as_str().len(), 39);
    }
}
