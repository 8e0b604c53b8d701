//! Splitting a spec into name and `key=value` parameters, value parsing, and [`SpecError`].
//!
//! Public so that other spec-like arguments of vmirq (the KVM harness's gap distributions)
//! share the syntax, the checks and the error messages instead of parsing on their own.

use super::Text;
use core::fmt;

/// The keys a spec accepts, printed comma-separated in error messages (`(none)` when empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowedKeys(pub &'static [&'static str]);

impl fmt::Display for AllowedKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(none)");
        }
        for (i, key) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(key)?;
        }
        Ok(())
    }
}

/// Why a policy spec was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Nothing was given.
    #[error("empty {kind} policy spec; expected one of: {allowed}")]
    Empty {
        /// "moderation" or "wait".
        kind: &'static str,
        /// The policy names.
        allowed: &'static str,
    },
    /// The policy name is unknown.
    #[error("unknown {kind} policy `{name}`; expected one of: {allowed}")]
    UnknownPolicy {
        /// "moderation" or "wait".
        kind: &'static str,
        /// What was given.
        name: Text,
        /// The policy names.
        allowed: &'static str,
    },
    /// A parameter is not `key=value`.
    #[error("`{policy}`: parameter `{param}` is not of the form key=value")]
    NotKeyValue {
        /// The policy.
        policy: &'static str,
        /// What was given.
        param: Text,
    },
    /// The policy has no such parameter.
    #[error("`{policy}` has no parameter `{key}`; allowed: {allowed}")]
    UnknownKey {
        /// The policy.
        policy: &'static str,
        /// What was given.
        key: Text,
        /// The allowed keys.
        allowed: AllowedKeys,
    },
    /// A parameter was given twice.
    #[error("`{policy}`: parameter `{key}` is given twice")]
    Duplicate {
        /// The policy.
        policy: &'static str,
        /// The key.
        key: &'static str,
    },
    /// A value does not parse or is out of range.
    #[error("`{policy}`: `{key}={value}`: expected {expected}")]
    BadValue {
        /// The policy.
        policy: &'static str,
        /// The key.
        key: &'static str,
        /// What was given.
        value: Text,
        /// What is accepted.
        expected: &'static str,
    },
}

/// Iterates a spec's parameters, checking keys against the allowed list and for repeats
/// (at most 32 keys).
pub struct Params<'a> {
    policy: &'static str,
    keys: &'static [&'static str],
    rest: Option<&'a str>,
    seen: u32,
}

impl<'a> Params<'a> {
    /// The parameters `params` (the text after `name:`, if any) of spec `policy`, which
    /// accepts `keys`.
    #[must_use]
    pub fn new(
        policy: &'static str,
        keys: &'static [&'static str],
        params: Option<&'a str>,
    ) -> Self {
        Self {
            policy,
            keys,
            rest: params.filter(|p| !p.is_empty()),
            seen: 0,
        }
    }

    /// The next `(key, value)`, with `key` one of the allowed keys.
    ///
    /// # Errors
    /// A parameter that is not `key=value`, an unknown key, or a key given twice.
    pub fn next_param(&mut self) -> Result<Option<(&'static str, Value<'a>)>, SpecError> {
        let Some(rest) = self.rest else {
            return Ok(None);
        };
        let (param, tail) = match split_param(rest) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        self.rest = tail;
        let (key, value) = param.split_once('=').ok_or(SpecError::NotKeyValue {
            policy: self.policy,
            param: Text::new(param),
        })?;
        let index =
            self.keys
                .iter()
                .position(|k| *k == key.trim())
                .ok_or(SpecError::UnknownKey {
                    policy: self.policy,
                    key: Text::new(key),
                    allowed: AllowedKeys(self.keys),
                })?;
        let key = self.keys[index];
        if self.seen & (1 << index) != 0 {
            return Err(SpecError::Duplicate {
                policy: self.policy,
                key,
            });
        }
        self.seen |= 1 << index;
        Ok(Some((
            key,
            Value {
                policy: self.policy,
                key,
                text: value.trim(),
            },
        )))
    }
}

/// Index of the comma that ends the current parameter. Commas inside a `table=` value are
/// not special because table rows are separated by `;`, so the first comma always ends it.
fn split_param(s: &str) -> Option<usize> {
    s.find(',')
}

/// One parameter value, with what is needed to report it.
pub struct Value<'a> {
    pub(super) policy: &'static str,
    pub(super) key: &'static str,
    pub(super) text: &'a str,
}

impl Value<'_> {
    /// The error for this value, which should have been `expected`.
    #[must_use]
    pub fn bad(&self, expected: &'static str) -> SpecError {
        SpecError::BadValue {
            policy: self.policy,
            key: self.key,
            value: Text::new(self.text),
            expected,
        }
    }

    /// An unsigned integer in `[min, max]`, `_` separators allowed.
    ///
    /// # Errors
    /// Anything else (sign, other characters, nothing, out of range or of `u64`).
    pub fn int(&self, min: u64, max: u64, expected: &'static str) -> Result<u64, SpecError> {
        let mut n: u64 = 0;
        let mut digits = 0;
        for c in self.text.chars() {
            if c == '_' {
                continue;
            }
            let d = c.to_digit(10).ok_or_else(|| self.bad(expected))?;
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(d)))
                .ok_or_else(|| self.bad(expected))?;
            digits += 1;
        }
        if digits == 0 || n < min || n > max {
            return Err(self.bad(expected));
        }
        Ok(n)
    }

    /// Like [`Value::int`], as a `u32`.
    ///
    /// # Errors
    /// As [`Value::int`].
    pub fn u32(&self, min: u32, max: u32, expected: &'static str) -> Result<u32, SpecError> {
        let n = self.int(u64::from(min), u64::from(max), expected)?;
        u32::try_from(n).map_err(|_| self.bad(expected))
    }

    pub(super) fn flag(&self) -> Result<bool, SpecError> {
        match self.text {
            "on" | "true" | "yes" | "1" => Ok(true),
            "off" | "false" | "no" | "0" => Ok(false),
            _ => Err(self.bad("on or off")),
        }
    }

    /// One of `choices`, returned as its index.
    pub(super) fn choice(
        &self,
        choices: &[&str],
        expected: &'static str,
    ) -> Result<usize, SpecError> {
        choices
            .iter()
            .position(|c| *c == self.text)
            .ok_or_else(|| self.bad(expected))
    }
}

/// Split `name[:params]`.
#[must_use]
pub fn split_spec(s: &str) -> (&str, Option<&str>) {
    let s = s.trim();
    match s.split_once(':') {
        Some((name, params)) => (name.trim(), Some(params)),
        None => (s, None),
    }
}
