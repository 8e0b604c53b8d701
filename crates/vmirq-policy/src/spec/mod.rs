//! Policy specs: the one syntax every vmirq command uses to name a policy and its parameters.
//!
//! ```text
//! SPEC   := NAME [ ":" PARAM { "," PARAM } ]
//! PARAM  := KEY "=" VALUE
//! ```
//!
//! Examples: `vic`, `count:usecs=50,frames=32`, `dim:mode=cqe,latency=on`, `budget:us=20`,
//! `dim-loop:period_ms=10`, `dim-lat:ack_pct=20`,
//! `kvm:max_ns=200000`, `vic:table=8:1/2;32:1/10`. Numbers may contain `_` separators;
//! booleans are `on`/`off` (also `true`/`false`, `yes`/`no`, `1`/`0`).
//!
//! A spec is parsed once into a validated value ([`ModerationSpec`], [`WaitSpec`],
//! [`ContentionSpec`]); a bad spec
//! gets a [`SpecError`] that names the bad key or value and lists what is allowed. Both spec
//! types print back in a canonical form (only the parameters that differ from the defaults).

mod contention;
mod moderation;
pub mod params;
mod text;
mod wait;

pub use contention::ContentionSpec;
pub use moderation::ModerationSpec;
pub use params::{AllowedKeys, SpecError};
pub use text::Text;
pub use wait::WaitSpec;
