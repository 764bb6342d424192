//! `Debug` for the crate's errors: the message, not the variant's fields.
//!
//! `fn main() -> Result<(), E>` and `unwrap` print an error with `Debug`. A derived `Debug`
//! shows `HostOverflowUnsupported` or a struct of numbers; the message says what happened
//! and what to do. So the crate's public errors print their message, then each source's
//! message that the message does not already contain.

/// Implements `Debug` for error types as their message and their sources' messages.
macro_rules! debug_as_message {
    ($($error:ty),+ $(,)?) => {
        $(
            impl std::fmt::Debug for $error {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    $crate::error_debug::write_chain(self, f)
                }
            }
        )+
    };
}
pub(crate) use debug_as_message;

/// Writes `error`'s message, then `caused by:` and each source's message not already part
/// of the text before it.
pub(crate) fn write_chain(
    error: &dyn std::error::Error,
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str("\ncaused by: ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    f.write_str(&text)
}

#[cfg(test)]
mod tests {
    #[derive(thiserror::Error)]
    #[error("outer failed")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner detail")]
    struct Inner;

    #[derive(thiserror::Error)]
    #[error("wrapped: {0}")]
    struct Wrapped(#[source] Inner);

    debug_as_message!(Outer, Wrapped);

    #[test]
    fn debug_prints_the_message_and_new_sources() {
        assert_eq!(
            format!("{:?}", Outer(Inner)),
            "outer failed\ncaused by: inner detail"
        );
        // A source already in the message is not repeated.
        assert_eq!(format!("{:?}", Wrapped(Inner)), "wrapped: inner detail");
    }
}
