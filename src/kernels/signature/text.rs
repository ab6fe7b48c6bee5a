//! Reading a signature's text: the parameter list as written (`Raw`), its defaults' literals and
//! its annotations, and the type each parameter settles on.

use super::types::{error, Default, Kind, Param, SignatureError, Type};

/// A parameter as written, before its type is settled.
pub(super) struct Raw {
    name: String,
    /// `*name`.
    star: bool,
    /// The first parameter after a bare `*`.
    pub(super) after_bare_star: bool,
    annotation: Option<String>,
    pub(super) default: Option<String>,
    keyword_only: bool,
}

impl Raw {
    pub(super) fn typed(&self) -> Result<Param, SignatureError> {
        let name = self.name.clone();
        let at = |what: String| SignatureError(format!("parameter '{name}': {what}"));
        let default = self.default.as_deref().map(literal).transpose().map_err(|e| at(e.0))?;
        let (annotated, nullable) = match self.annotation.as_deref() {
            Some(annotation) => {
                let (ty, nullable) = annotation_type(annotation).map_err(|e| at(e.0))?;
                (Some(ty), nullable)
            }
            None => (None, false),
        };
        let inferred = match &default {
            None | Some(Default::None) => Type::Tensor,
            Some(Default::Int(_)) => Type::Int,
            Some(Default::Float(_)) => Type::Float,
            Some(Default::Bool(_)) => Type::Bool,
            Some(Default::Str(_)) => Type::Str,
        };
        // An integer literal that `i64` refused reads as a float: an int it cannot be (a float
        // parameter may have it).
        if let (Some(Default::Float(_)), Some(written)) = (&default, self.default.as_deref()) {
            if is_integer_literal(written) && annotated != Some(Type::Float) {
                return Err(at(format!("default {written} does not fit in 64 bits")));
            }
        }
        let ty = annotated.unwrap_or(inferred);
        let default = match (ty, default) {
            (Type::Float, Some(Default::Int(i))) => Some(Default::Float(i as f64)),
            (_, Some(Default::None)) => Some(Default::None),
            (ty, Some(_)) if ty != inferred => {
                let written = self.default.as_deref().unwrap_or_default();
                return Err(at(format!("a parameter of type {} cannot default to {written}", ty.name())));
            }
            (_, default) => default,
        };
        if self.star && default.is_some() {
            return Err(at("*args takes no default".into()));
        }
        let kind = match (self.star, self.keyword_only) {
            (true, _) => Kind::Variadic,
            (false, true) => Kind::KeywordOnly,
            (false, false) => Kind::Positional,
        };
        let optional = nullable || default == Some(Default::None);
        Ok(Param { name: self.name.clone(), ty, optional, default, kind })
    }
}

/// `tensor`, `float | None`, `None | int`.
fn annotation_type(annotation: &str) -> Result<(Type, bool), SignatureError> {
    let parts: Vec<&str> = annotation.split('|').map(str::trim).collect();
    let nullable = parts.contains(&"None");
    let named: Vec<&str> = parts.iter().copied().filter(|p| *p != "None").collect();
    match named[..] {
        [one] => match Type::from_name(one) {
            Some(ty) => Ok((ty, nullable)),
            None => error(format!("unknown type '{one}' (tensor, int, float, bool, str, or one of them | None)")),
        },
        _ => error(format!("unknown type '{annotation}' (tensor, int, float, bool, str, or one of them | None)")),
    }
}

/// Digits, with a sign or not: Python reads an int.
fn is_integer_literal(text: &str) -> bool {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

/// A default as written: `None`, `True`, `1`, `-2.5e-3`, `"text"` or `'text'`.
fn literal(text: &str) -> Result<Default, SignatureError> {
    match text {
        "None" => return Ok(Default::None),
        "True" => return Ok(Default::Bool(true)),
        "False" => return Ok(Default::Bool(false)),
        _ => {}
    }
    if let Some(quote) = text.chars().next().filter(|c| *c == '"' || *c == '\'') {
        // Printable ASCII: CPython reads a text signature as ASCII, and a line break ends it.
        let plain =
            |body: &str| !body.contains(quote) && body.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'\\');
        return match text.len() >= 2 && text.ends_with(quote) && plain(&text[1..text.len() - 1]) {
            true => Ok(Default::Str(text[1..text.len() - 1].to_string())),
            false => {
                error(format!("{text} is not a plain string literal (printable ASCII, no escapes, no inner quote)"))
            }
        };
    }
    // Python's decimal int has no leading zero (`01` is a SyntaxError; `0` and `00` are not).
    let digits = text.trim_start_matches(['-', '+']);
    if digits.len() > 1
        && digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits.bytes().any(|b| b != b'0')
    {
        return error(format!("default {text} is no Python int (a leading zero)"));
    }
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Default::Int(i));
    }
    match text.parse::<f64>() {
        Ok(f) if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) => {
            Ok(Default::Float(f))
        }
        _ => error(format!("default {text} is not None, True, False, a number or a string")),
    }
}

/// Python's keywords (`keyword.kwlist`, 3.9 to 3.15) and `__debug__`, which nothing may bind
/// either: no parameter or kernel may be named one (a call could not pass it by name, nor
/// `inspect.signature` or a stub spell it).
const KEYWORDS: [&str; 36] = [
    "False",
    "None",
    "True",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "__debug__",
];

/// An ASCII Python identifier that is no keyword (nor `__debug__`).
pub(super) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !KEYWORDS.contains(&name)
}

/// Reads the parameter list after `(`, up to and past its `)`.
pub(super) struct Scanner<'a> {
    pub(super) text: &'a str,
    pub(super) at: usize,
}

impl Scanner<'_> {
    pub(super) fn params(&mut self) -> Result<Vec<Raw>, SignatureError> {
        let mut out = Vec::new();
        let (mut keyword_only, mut after_bare_star) = (false, false);
        loop {
            self.skip_spaces();
            if out.is_empty() && !after_bare_star && self.eat(')') {
                break;
            }
            let star = self.eat('*');
            self.skip_spaces();
            let name = self.until(&[',', ')', ':', '=']).trim().to_string();
            if star && name.is_empty() {
                // A bare `*`: what follows is keyword-only.
                if keyword_only {
                    return error("two '*' in the parameter list");
                }
                (keyword_only, after_bare_star) = (true, true);
                if self.separator()? {
                    return error("a bare '*' must be followed by a parameter");
                }
                continue;
            }
            if !is_identifier(&name) {
                return error(format!("'{name}' is not a parameter name"));
            }
            if star && keyword_only {
                return error(format!("*{name} after '*'"));
            }
            let annotation = match self.eat(':') {
                true => Some(self.until(&[',', ')', '=']).trim().to_string()),
                false => None,
            };
            let default = match self.eat('=') {
                true => Some(self.default()?),
                false => None,
            };
            out.push(Raw { name, star, after_bare_star, annotation, default, keyword_only });
            keyword_only |= star;
            after_bare_star = false;
            if self.separator()? {
                return Ok(out);
            }
        }
        Ok(out)
    }

    /// After a parameter: `,` (false) or `)` (true).
    fn separator(&mut self) -> Result<bool, SignatureError> {
        self.skip_spaces();
        if self.eat(',') {
            return Ok(false);
        }
        if self.eat(')') {
            return Ok(true);
        }
        match self.text[self.at..].chars().next() {
            Some(c) => error(format!("unexpected '{c}' in the parameter list")),
            None => error("the parameter list has no ')'"),
        }
    }

    /// A default's text: a quoted string whole, else up to `,` or `)`.
    fn default(&mut self) -> Result<String, SignatureError> {
        self.skip_spaces();
        let rest = &self.text[self.at..];
        if let Some(quote) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') {
            let Some(end) = rest[1..].find(quote) else { return error("a string default has no closing quote") };
            self.at += end + 2;
            return Ok(rest[..end + 2].to_string());
        }
        Ok(self.until(&[',', ')']).trim().to_string())
    }

    fn until(&mut self, stops: &[char]) -> &str {
        let rest = &self.text[self.at..];
        let end = rest.find(stops).unwrap_or(rest.len());
        self.at += end;
        &rest[..end]
    }

    fn eat(&mut self, c: char) -> bool {
        let hit = self.text[self.at..].starts_with(c);
        if hit {
            self.at += c.len_utf8();
        }
        hit
    }

    fn skip_spaces(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }
}
