//! Where a value sits in a frame, written as every message of hopper names it
//! ([`hopper_core::value_path`]): `jobs[2].args.ratio`.

use ciborium::Value;
use hopper_core::value_path;

/// One step down from a map or an array.
#[derive(Debug)]
pub(crate) enum Step {
    /// The entry with this key (a text, unless the peer sent another kind of key).
    Key(Value),
    /// The item at this index.
    Index(usize),
}

/// The steps as one path: `job.args.x[1]`; a key that is not text is written `?`.
pub(crate) fn written(steps: &[Step]) -> String {
    value_path::written(steps.iter().map(|step| match step {
        Step::Key(key) => value_path::Step::Key(key.as_text().unwrap_or("?")),
        Step::Index(i) => value_path::Step::Index(*i),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_that_is_not_text_is_a_question_mark() {
        let key = |k: &str| Step::Key(Value::Text(k.into()));
        assert_eq!(
            written(&[key("jobs"), Step::Index(2), key("x")]),
            "jobs[2].x"
        );
        assert_eq!(written(&[Step::Key(Value::Integer(1.into()))]), "?");
    }
}
