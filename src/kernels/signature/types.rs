//! What a signature says: its parameters, their types and defaults, how each is passed.

use std::fmt;

/// The most parameters a kernel has (a call binds its keywords on the stack).
pub const MAX_PARAMETERS: usize = 64;

/// What a parameter takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    Tensor,
    Int,
    Float,
    Bool,
    Str,
}

impl Type {
    /// The annotation's spelling (and a message's).
    pub fn name(self) -> &'static str {
        match self {
            Type::Tensor => "tensor",
            Type::Int => "int",
            Type::Float => "float",
            Type::Bool => "bool",
            Type::Str => "str",
        }
    }

    pub(super) fn from_name(name: &str) -> Option<Type> {
        [Type::Tensor, Type::Int, Type::Float, Type::Bool, Type::Str].into_iter().find(|t| t.name() == name)
    }
}

/// A parameter's default, as the kernel receives it when the caller leaves it out.
#[derive(Clone, Debug, PartialEq)]
pub enum Default {
    None,
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

/// How a caller may pass a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// By position or by keyword.
    Positional,
    /// `*name`: every positional argument left over, none or many.
    Variadic,
    /// By keyword only (after `*name` or a bare `*`).
    KeywordOnly,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub ty: Type,
    /// None is accepted (a default of None, or an annotation `T | None`).
    pub optional: bool,
    pub default: Option<Default>,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    pub name: String,
    pub params: Vec<Param>,
    /// The return annotation as written (`tensor`, `tuple[tensor, tensor]`), if any.
    pub returns: Option<String>,
    pub doc: String,
    /// The parameter list as Python's `__text_signature__` takes it: names, `*`, defaults as
    /// written, no annotations (`(a, b, alpha=1.0)`).
    pub text_signature: String,
    /// The whole signature line, typed (`add(a: tensor, b: tensor, alpha: float = 1.0) -> tensor`).
    pub typed: String,
    /// What binding asks on every call, worked out once: how many parameters are passed by
    /// position before the variadic one, its index, and whether any is keyword-only.
    pub(super) shape: Shape,
}

#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub(super) struct Shape {
    pub(super) positional: usize,
    pub(super) variadic: Option<usize>,
    pub(super) keyword_only: bool,
    /// Every parameter takes a tensor (`add(a, b)`, `nop(*xs)`).
    pub(super) tensors_only: bool,
}

impl Shape {
    pub(super) fn of(params: &[Param]) -> Shape {
        Shape {
            positional: params.iter().take_while(|p| p.kind == Kind::Positional).count(),
            variadic: params.iter().position(|p| p.kind == Kind::Variadic),
            keyword_only: params.iter().any(|p| p.kind == Kind::KeywordOnly),
            tensors_only: params.iter().all(|p| p.ty == Type::Tensor),
        }
    }
}

impl Signature {
    /// How many parameters are passed by position before the variadic one (or all of them).
    #[inline]
    pub fn positional(&self) -> usize {
        self.shape.positional
    }

    /// The index of the `*name` parameter, if any.
    #[inline]
    pub fn variadic(&self) -> Option<usize> {
        self.shape.variadic
    }

    /// Whether every parameter takes a tensor (or None, where it is optional).
    #[inline]
    pub fn takes_only_tensors(&self) -> bool {
        self.shape.tensors_only
    }

    /// Whether `count` positional arguments alone fill every parameter, each with one (`add(a,
    /// b)`, `nop(*xs)`): the call binds without looking at a default or a keyword.
    #[inline]
    pub fn filled_by(&self, count: usize) -> bool {
        !self.shape.keyword_only
            && match self.shape.variadic {
                Some(_) => count >= self.shape.positional,
                None => count == self.shape.positional,
            }
    }

    /// The parameter a flattened argument belongs to: the fixed ones, then `count - fixed`
    /// values of the variadic one, then the keyword-only ones (`bind::Bound`'s order).
    pub fn param_of(&self, index: usize, count: usize) -> Option<&Param> {
        let positional = self.positional();
        match self.variadic() {
            _ if index < positional => self.params.get(index),
            None => self.params.get(index),
            Some(v) => {
                let extra = count + 1 - self.params.len();
                match index < positional + extra {
                    true => self.params.get(v),
                    false => self.params.get(index + 1 - extra),
                }
            }
        }
    }
}

/// Why a signature could not be read, said about its text.
#[derive(Debug, PartialEq, Eq)]
pub struct SignatureError(pub String);

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub(super) fn error<T>(what: impl fmt::Display) -> Result<T, SignatureError> {
    Err(SignatureError(what.to_string()))
}
