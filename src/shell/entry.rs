//! The boundary every C entry point shares, written once as the Python ones share
//! `shell::attached!`: [`c_entry!`] runs the body inside `error::boundary` on the function's error
//! channel (a Python exception, `dlpx_last_error()`, the caller's `SetError`), checks each
//! out-pointer and each required in-pointer it names (a NULL one is the error "<name> is NULL",
//! the parameter's own name), and with `|py|` gives the body the token its contract promises (the
//! caller holds the GIL). What lies below gets its pointers checked: no NULL check of a caller's
//! pointer is written twice.
//!
//! It lives in the Python layer, beside `attached!`, so that every C entry point above the core
//! uses it: the `dlpx_*` functions (`exports/`), the synthetic tables' entries (`producers/`) and
//! the PyObject entries both kinds of table share (`tensor_type/`). The pointer checks themselves
//! (`error::out`, `error::given`) live in the bottom layer, so that the core's table entries (the
//! allocator, `current_work_stream`), which may not name this one, check theirs with them too.

/// `c_entry!(channel, "context", out(a, b), given(x), |py| { ... })`: the body inside the
/// boundary, `a` and `b` (out-pointer parameters) shadowed by their checked [`Out`]s, `x` (an
/// in-pointer the caller must give; `given(...)` may be left out) by its checked `NonNull`, `py`
/// the token. The checks run in that order: out-pointers, the token, in-pointers. With `|| ...`
/// the body gets no token (entry points that need no interpreter, or take the GIL's word later).
macro_rules! c_entry {
    ($channel:expr, $context:expr, out($($out:ident),*), $(given($($given:ident),*),)? |$py:ident| $body:expr) => {
        $crate::error::boundary($channel, $context, || {
            $(let $out = $crate::error::out($out, stringify!($out))?;)*
            // SAFETY: the caller holds the GIL, by the entry point's contract.
            let $py = unsafe { $crate::cpython::Python::assume_attached()? };
            $($(let $given = $crate::error::given($given, stringify!($given))?;)*)?
            $body
        })
    };
    ($channel:expr, $context:expr, out($($out:ident),*), $(given($($given:ident),*),)? || $body:expr) => {
        $crate::error::boundary($channel, $context, || {
            $(let $out = $crate::error::out($out, stringify!($out))?;)*
            $($(let $given = $crate::error::given($given, stringify!($given))?;)*)?
            $body
        })
    };
}

pub(crate) use c_entry;
