//! Binding a call's arguments to a kernel's parameters, as Python binds them: positional ones in
//! order, the rest to `*name`, keywords by name, defaults for what is left out. The arguments
//! are flattened in parameter order (the variadic values where `*name` stands), which is how
//! the kernel indexes them.

use super::signature::{Default, Kind, Signature, MAX_PARAMETERS};
use crate::error::{Error, Result};

/// Where a flattened argument comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Source<'s> {
    /// The caller's positional argument at this index.
    Positional(usize),
    /// The caller's keyword argument at this index.
    Keyword(usize),
    /// The parameter's default.
    Default(&'s Default),
}

#[cold]
fn too_many(positional: usize) -> Error {
    Error::type_error(format!("{positional} arguments: a kernel takes at most {}", i32::MAX as usize - MAX_PARAMETERS))
}

/// Calls `take(parameter, source)` for every flattened argument, in order, with the call's
/// `positional` arguments and `keywords` (the parameter index each keyword names; the caller
/// matched the names and refused unknown ones). TypeErrors say what Python's would.
pub fn bind<'s>(
    signature: &'s Signature,
    positional: usize,
    keywords: &[usize],
    mut take: impl FnMut(usize, Source<'s>) -> Result<()>,
) -> Result<()> {
    // A call hands its kernel an `int32_t` count (kernel.h's `struct DlpxCall`).
    if positional > i32::MAX as usize - MAX_PARAMETERS {
        return Err(too_many(positional));
    }
    let fixed = signature.positional();
    let variadic = signature.variadic();
    if keywords.is_empty() && signature.filled_by(positional) {
        // The common call: each parameter gets the argument at its place, `*name` the rest.
        return (0..positional)
            .try_for_each(|i| take(variadic.filter(|_| i >= fixed).unwrap_or(i), Source::Positional(i)));
    }
    if variadic.is_none() && positional > fixed {
        let s = if fixed == 1 { "" } else { "s" };
        return Err(Error::type_error(format!("takes at most {fixed} positional argument{s} ({positional} given)")));
    }
    for (k, &p) in keywords.iter().enumerate() {
        let name = &signature.params[p].name;
        if Some(p) == variadic {
            return Err(Error::type_error(format!("got an unexpected keyword argument '{name}'")));
        }
        if (p < fixed && p < positional) || keywords[..k].contains(&p) {
            return Err(Error::type_error(format!("got multiple values for argument '{name}'")));
        }
    }
    for (p, param) in signature.params.iter().enumerate() {
        match param.kind {
            Kind::Positional if p < positional => take(p, Source::Positional(p))?,
            Kind::Variadic => (fixed..positional).try_for_each(|i| take(p, Source::Positional(i)))?,
            _ => match (keywords.iter().position(|&q| q == p), &param.default) {
                (Some(k), _) => take(p, Source::Keyword(k))?,
                (None, Some(default)) => take(p, Source::Default(default))?,
                (None, None) => {
                    return Err(Error::type_error(format!("missing required argument '{}'", param.name)));
                }
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::signature::parse;
    use super::*;

    fn sources(text: &str, positional: usize, keywords: &[usize]) -> Result<Vec<(usize, String)>> {
        let signature = parse(text).unwrap();
        let mut out = Vec::new();
        bind(&signature, positional, keywords, |p, s| {
            out.push((p, format!("{s:?}")));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn positional_keyword_variadic_and_defaults() {
        let got = sources("f(a, b, alpha=1.0)", 1, &[1]).unwrap();
        assert_eq!(got, [(0, "Positional(0)".into()), (1, "Keyword(0)".into()), (2, "Default(Float(1.0))".into())]);
        let got = sources("nop(*xs)", 3, &[]).unwrap();
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [0, 0, 0]);
        let got = sources("g(a, *xs, scale=2)", 3, &[2]).unwrap();
        assert_eq!(
            got,
            [
                (0, "Positional(0)".into()),
                (1, "Positional(1)".into()),
                (1, "Positional(2)".into()),
                (2, "Keyword(0)".into())
            ]
        );
        assert_eq!(sources("h()", 0, &[]).unwrap(), []);
    }

    #[test]
    fn what_python_refuses_is_a_type_error() {
        let message = |text: &str, positional, keywords: &[usize]| {
            sources(text, positional, keywords).unwrap_err().fact().to_string()
        };
        assert_eq!(message("f(a, b)", 3, &[]), "takes at most 2 positional arguments (3 given)");
        // More than a kernel's int32_t count holds (kernel.h's `struct DlpxCall`), before any is taken.
        let huge = i32::MAX as usize;
        assert_eq!(message("nop(*xs)", huge, &[]), format!("{huge} arguments: a kernel takes at most {}", huge - 64));
        assert_eq!(message("f(a, b)", 1, &[]), "missing required argument 'b'");
        assert_eq!(message("f(a, b)", 1, &[0]), "got multiple values for argument 'a'");
        assert_eq!(message("f(a, *xs)", 1, &[1]), "got an unexpected keyword argument 'xs'");
        assert_eq!(message("f(a, *, k)", 1, &[]), "missing required argument 'k'");
        assert!(sources("f(a, *, k)", 2, &[]).is_err());
    }
}
