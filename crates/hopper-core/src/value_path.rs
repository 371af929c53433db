//! How messages name where a value sits inside a larger one (a job's arguments, a request
//! body, a wire frame): keys joined by dots, array indices in brackets
//! (`jobs[2].args.ratio`), each key cut as logs cut a peer's text ([`capped`]).
//!
//! ```
//! use hopper_core::value_path::{Step, written};
//!
//! let path = written([Step::Key("jobs"), Step::Index(2), Step::Key("args")]);
//! assert_eq!(path, "jobs[2].args");
//! ```

use std::fmt::Write;

use crate::log_limit::capped;

/// One step down from a map or an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// The entry with this key.
    Key(&'a str),
    /// The item at this index.
    Index(usize),
}

/// The steps as one path; empty for none (the value itself).
pub fn written<'a>(steps: impl IntoIterator<Item = Step<'a>>) -> String {
    let mut path = String::new();
    for step in steps {
        match step {
            Step::Key(key) => {
                if !path.is_empty() {
                    path.push('.');
                }
                let _ = write!(path, "{}", capped(key));
            }
            Step::Index(i) => {
                let _ = write!(path, "[{i}]");
            }
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_as_accessors_with_long_keys_cut() {
        assert_eq!(
            written([Step::Index(0), Step::Key("a"), Step::Index(3)]),
            "[0].a[3]"
        );
        assert_eq!(written([]), "");
        let long = "k".repeat(100);
        let path = written([Step::Key("args"), Step::Key(&long)]);
        assert!(
            path.starts_with("args.kkk") && path.ends_with("…(100 bytes)"),
            "{path}"
        );
    }
}
