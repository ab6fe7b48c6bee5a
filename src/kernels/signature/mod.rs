//! A kernel's signature as its export spells it, `add(a, b, alpha=1.0) -> tensor: doc`: the
//! parameters a caller binds by position or keyword, their types and defaults, and the doc
//! (docs/kernels.md, "Kernel libraries"). Parsed once, when the library is loaded; nothing here
//! runs per call.
//!
//! A parameter's type is its annotation (`a: tensor`, `eps: float | None`) or, without one, read
//! from its default: none → tensor, `1.0` → float, `1` → int, `True` → bool, `"x"` → str,
//! `None` → an optional tensor. `*name` takes any number of tensors (or of its annotated type);
//! the parameters after it, or after a bare `*`, are keyword-only.

mod text;
mod types;

pub use types::*;

use types::Shape;

use text::{is_identifier, Raw, Scanner};
use types::error;

/// Reads `name(params) [-> returns] [: doc]`.
pub fn parse(input: &str) -> Result<Signature, SignatureError> {
    let text = input.trim();
    let Some(open) = text.find('(') else { return error("no parameter list: expected name(...)") };
    let name = text[..open].trim();
    // A module's own attributes (`__file__`, `__getattr__`) are no kernel's to take.
    if name.starts_with("__") && name.ends_with("__") && name.len() > 4 {
        return error(format!("'{name}' is a module attribute's name (a dunder), not a kernel's"));
    }
    if !is_identifier(name) {
        return error(format!("'{name}' is not a name"));
    }
    let mut scanner = Scanner { text, at: open + 1 };
    let raw = scanner.params()?;
    let rest = text[scanner.at..].trim_start();
    let (returns, doc) = match rest.strip_prefix("->") {
        Some(after) => match after.find(':') {
            Some(colon) => (Some(after[..colon].trim()), after[colon + 1..].trim()),
            None => (Some(after.trim()), ""),
        },
        None => match rest.strip_prefix(':') {
            Some(doc) => (None, doc.trim()),
            None if rest.is_empty() => (None, ""),
            None => return error(format!("unexpected '{rest}' after the parameter list")),
        },
    };
    if returns == Some("") {
        return error("'->' without a return annotation");
    }
    if returns.is_some_and(|r| r.contains(['\n', '\r'])) {
        return error("a return annotation spans lines (its typed line and stub read one)");
    }
    // Python reads past what kernel.hpp's check of a typed kernel's result reads (which then
    // checks nothing): the stub would say a result no check held the kernel to.
    if returns.is_some_and(|r| r.contains('#')) {
        return error("a return annotation holds '#' (a stub reads a comment there, kernel.hpp does not)");
    }
    if returns.is_some_and(|r| r.split_whitespace().collect::<String>().contains(",]")) {
        return error("a return annotation ends a list with a comma (tuple[int,]: write tuple[int])");
    }
    // The doc (a subslice of `input`) may hold any character; what is before it is read by
    // kernel.hpp too.
    let head = if doc.is_empty() { input } else { &input[..doc.as_ptr() as usize - input.as_ptr() as usize] };
    check_spaces(head)?;
    let params = raw.iter().map(Raw::typed).collect::<Result<Vec<_>, _>>()?;
    check(&params)?;
    let (text_signature, typed) = spell(name, &params, &raw, returns);
    let shape = Shape::of(&params);
    Ok(Signature {
        name: name.to_string(),
        params,
        returns: returns.map(str::to_string),
        doc: doc.to_string(),
        text_signature,
        typed,
        shape,
    })
}

/// Refuses whitespace other than what kernel.hpp reads as such (space, tab, line breaks: its
/// `sig::is_space`): a no-break space a copy brought in (`k(a,\u{a0}*xs)`) was `*xs` here and a
/// tensor parameter there, so a C++ kernel of the wrong arity compiled.
fn check_spaces(head: &str) -> Result<(), SignatureError> {
    match head.chars().find(|&c| c.is_whitespace() && !matches!(c, ' ' | '\t' | '\n' | '\r')) {
        Some(c) => error(format!("U+{:04X} is a space kernel.hpp does not read as one: write a plain space", c as u32)),
        None => Ok(()),
    }
}

/// What Python requires of a parameter list, and what binding relies on.
fn check(params: &[Param]) -> Result<(), SignatureError> {
    if params.len() > MAX_PARAMETERS {
        return error(format!("{} parameters; a kernel has at most {MAX_PARAMETERS}", params.len()));
    }
    for (i, p) in params.iter().enumerate() {
        if params[..i].iter().any(|q| q.name == p.name) {
            return error(format!("parameter '{}' appears twice", p.name));
        }
    }
    let positional: Vec<&Param> = params.iter().filter(|p| p.kind == Kind::Positional).collect();
    if let Some(at) = positional.iter().position(|p| p.default.is_some()) {
        if let Some(p) = positional[at..].iter().find(|p| p.default.is_none()) {
            return error(format!("parameter '{}' without a default follows one with a default", p.name));
        }
    }
    Ok(())
}

/// The text signature (Python's `__text_signature__`) and the typed line (the doc's first).
fn spell(name: &str, params: &[Param], raw: &[Raw], returns: Option<&str>) -> (String, String) {
    let mut plain = Vec::new();
    let mut typed = Vec::new();
    for (p, r) in params.iter().zip(raw) {
        if r.after_bare_star {
            plain.push("*".to_string());
            typed.push("*".to_string());
        }
        let star = if p.kind == Kind::Variadic { "*" } else { "" };
        let ty = match p.optional {
            true => format!("{} | None", p.ty.name()),
            false => p.ty.name().to_string(),
        };
        match &r.default {
            Some(d) => {
                plain.push(format!("{star}{}={d}", p.name));
                typed.push(format!("{star}{}: {ty} = {d}", p.name));
            }
            None => {
                plain.push(format!("{star}{}", p.name));
                typed.push(format!("{star}{}: {ty}", p.name));
            }
        }
    }
    let arrow = returns.map(|r| format!(" -> {r}")).unwrap_or_default();
    (format!("({})", plain.join(", ")), format!("{name}({}){arrow}", typed.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(s: &Signature) -> Vec<(&str, Type, bool, Kind)> {
        s.params.iter().map(|p| (p.name.as_str(), p.ty, p.optional, p.kind)).collect()
    }

    #[test]
    fn types_come_from_annotations_or_defaults() {
        let s = parse("add(a, b: tensor, alpha=1.0, n=2, flag=True, mode=\"fast\", bias=None, eps: float | None = None) -> tensor: Adds.").unwrap();
        assert_eq!(s.name, "add");
        assert_eq!(
            types(&s),
            [
                ("a", Type::Tensor, false, Kind::Positional),
                ("b", Type::Tensor, false, Kind::Positional),
                ("alpha", Type::Float, false, Kind::Positional),
                ("n", Type::Int, false, Kind::Positional),
                ("flag", Type::Bool, false, Kind::Positional),
                ("mode", Type::Str, false, Kind::Positional),
                ("bias", Type::Tensor, true, Kind::Positional),
                ("eps", Type::Float, true, Kind::Positional),
            ]
        );
        assert_eq!(s.params[5].default, Some(Default::Str("fast".into())));
        assert_eq!((s.returns.as_deref(), s.doc.as_str()), (Some("tensor"), "Adds."));
        assert_eq!(s.text_signature, "(a, b, alpha=1.0, n=2, flag=True, mode=\"fast\", bias=None, eps=None)");
        assert!(s.typed.starts_with("add(a: tensor, b: tensor, alpha: float = 1.0, n: int = 2,"), "{}", s.typed);
        assert!(s.typed.ends_with("eps: float | None = None) -> tensor"), "{}", s.typed);
    }

    #[test]
    fn variadic_and_keyword_only_parameters() {
        let s = parse("nop(*tensors): Views its tensors.").unwrap();
        assert_eq!(types(&s), [("tensors", Type::Tensor, false, Kind::Variadic)]);
        assert_eq!((s.returns, s.doc.as_str(), s.text_signature.as_str()), (None, "Views its tensors.", "(*tensors)"));
        let s = parse("f(a, *xs, alpha=2, beta: float = 1)").unwrap();
        assert_eq!(s.params[2].kind, Kind::KeywordOnly);
        assert_eq!(s.params[3].default, Some(Default::Float(1.0)));
        assert_eq!((s.positional(), s.variadic()), (1, Some(1)));
        // a, x0, x1, x2, alpha, beta
        let names: Vec<&str> = (0..6).map(|i| s.param_of(i, 6).unwrap().name.as_str()).collect();
        assert_eq!(names, ["a", "xs", "xs", "xs", "alpha", "beta"]);
        let s = parse("g(a, *, scale=1.0)").unwrap();
        assert_eq!(s.params[1].kind, Kind::KeywordOnly);
        assert_eq!(s.text_signature, "(a, *, scale=1.0)");
        assert_eq!(parse("h()").unwrap().params, []);
    }

    #[test]
    fn bad_signatures_say_what_is_wrong() {
        let wrong = |text: &str| parse(text).unwrap_err().0;
        assert!(wrong("add").contains("no parameter list"));
        assert!(wrong("1add(a)").contains("not a name"));
        assert!(wrong("class(a)").contains("'class' is not a name"));
        assert!(wrong("kw(lambda, *, x=1)").contains("'lambda' is not a parameter name"));
        assert!(wrong("kw(a, *, None=1)").contains("'None' is not a parameter name"));
        assert!(parse("soft(match, case, type, _)").is_ok(), "soft keywords are names");
        assert!(wrong("add(a, a)").contains("appears twice"));
        assert!(wrong("add(a=1, b)").contains("'b' without a default"));
        assert!(wrong("add(a: matrix)").contains("unknown type 'matrix'"));
        assert!(wrong("add(a: int = 1.5)").contains("of type int cannot default to 1.5"));
        assert!(wrong("add(a, *)").contains("bare '*' must be followed"));
        assert!(wrong("add(a=[1])").contains("is not None, True, False"));
        assert!(wrong("add(n=99999999999999999999)").contains("default 99999999999999999999 does not fit in 64 bits"));
        assert!(wrong("add(n=-9223372036854775809)").contains("does not fit in 64 bits"));
        assert!(parse("add(n=-9223372036854775808, x=1e400, y: float = 99999999999999999999)").is_ok());
        assert!(wrong("add(n: int = 99999999999999999999)").contains("does not fit in 64 bits"));
        assert!(wrong("add(__debug__=1)").contains("not a parameter name"));
        assert!(wrong("add(n=-)").contains("is not None, True, False"));
        assert!(wrong("add(a, b").contains("no ')'"));
        assert!(wrong("add(*xs=1)").contains("takes no default"));
        assert!(wrong("add(a) junk").contains("unexpected"));
        assert!(wrong("add(s='a\\n')").contains("plain string literal"));
        // What CPython's text signatures cannot hold: a line break, a control character,
        // non-ASCII; a decimal int with a leading zero (a SyntaxError in Python).
        for bad in ["add(s=\"x\ny\")", "add(s='\t')", "add(s='h\u{e9}llo')"] {
            assert!(wrong(bad).contains("plain string literal"), "{bad}");
        }
        assert!(wrong("add(s=\")").contains("no closing quote"));
        // What kernel.hpp would read otherwise: a no-break space; an annotation over two lines.
        for bad in ["k(a,\u{a0}*xs) -> int", "\u{a0}k(a)", "k(a) ->\u{3000}int: doc"] {
            assert!(wrong(bad).contains("a space kernel.hpp does not read as one"), "{bad}");
        }
        assert!(parse("k(a) -> int: a doc\u{a0}with any\u{3000}space").is_ok());
        assert!(wrong("two() -> tuple[int,\n int]: two ints.").contains("spans lines"));
        // What a stub reads otherwise than kernel.hpp's check: a comment, a trailing comma.
        assert!(wrong("k() -> int # c: says int").contains("holds '#'"));
        assert!(wrong("k() -> tuple[int,]: one").contains("ends a list with a comma"));
        assert!(wrong("k() -> tuple[int, bool , ]: two").contains("ends a list with a comma"));
        assert!(parse("k() -> tuple[int, bool]: two, # and a doc with [a,] in it").is_ok());
        assert!(wrong("add(n=01)").contains("no Python int (a leading zero)"));
        assert!(wrong("add(n=-007)").contains("leading zero"));
        assert!(parse("add(n=0, m=00, k=-0, x=01.5, y=0e0, s='a b ~')").is_ok());
        // A module's own attributes are no kernel's names.
        for dunder in ["__file__(a)", "__getattr__(name: str)", "__name__()"] {
            assert!(wrong(dunder).contains("a module attribute's name (a dunder)"), "{dunder}");
        }
        assert!(parse("_private(a)").is_ok() && parse("__private(a)").is_ok());
    }
}
