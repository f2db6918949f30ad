//! [`debug_fields!`](crate::debug_fields): a `Debug` that shows only the fields it names.
//!
//! For types that hold secrets (passwords, tokens, signing keys) or handles, so that logging
//! one with `{:?}` can never print what it must not.

/// Implements `Debug` for the struct `$ty`, showing only the listed fields; the output ends in
/// `..` to say that others were left out. `debug_fields!(Credentials { name })`.
#[macro_export]
macro_rules! debug_fields {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(::std::stringify!($ty))
                    $(.field(::std::stringify!($field), &self.$field))*
                    .finish_non_exhaustive()
            }
        }
    };
}

#[cfg(test)]
mod tests {
    /// A credential as a caller would hold it.
    #[allow(dead_code)] // `secret` is read by nothing: that is the point
    struct Login {
        name: String,
        secret: String,
    }

    crate::debug_fields!(Login { name });

    #[test]
    fn only_the_named_fields_are_shown() {
        let login = Login {
            name: "ann".into(),
            secret: "hunter2".into(),
        };
        assert_eq!(format!("{login:?}"), r#"Login { name: "ann", .. }"#);
    }
}
