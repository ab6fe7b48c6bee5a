//! Blocking calls (a CUDA synchronisation, the first driver initialisation, a device-to-host
//! copy) let other threads run meanwhile: the Python layer installs a hook that releases the
//! GIL around them. The core never names Python; without a hook the call just runs.

use std::sync::atomic::{AtomicPtr, Ordering};

/// Runs the closure it is given, with whatever the caller's runtime needs released.
pub type Hook = fn(&mut dyn FnMut());

static HOOK: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Installs `hook` for every later blocking call (the Python layer does, at initialisation).
pub fn install(hook: Hook) {
    HOOK.store(hook as *mut (), Ordering::Release);
}

/// Runs `f`, a blocking call that touches no Python object, through the installed hook.
///
/// Whatever `f` waits for must never wait for the GIL: a `OnceCell` initialised inside `f` is
/// entered only through `blocking` by GIL holders, so none of them blocks on it holding the GIL.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    let hook = HOOK.load(Ordering::Acquire);
    if hook.is_null() {
        return f();
    }
    // SAFETY: only `install` stores here, and it stores a `Hook`.
    let hook = unsafe { std::mem::transmute::<*mut (), Hook>(hook) };
    let mut f = Some(f);
    let mut result = None;
    hook(&mut || result = f.take().map(|f| f()));
    result.expect("the blocking hook runs its closure exactly once")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static AROUND: AtomicUsize = AtomicUsize::new(0);

    fn counting_hook(run: &mut dyn FnMut()) {
        AROUND.fetch_add(1, Ordering::SeqCst);
        run();
    }

    #[test]
    fn runs_once_with_and_without_a_hook() {
        assert_eq!(blocking(|| 7), 7);
        install(counting_hook);
        assert_eq!(blocking(|| 8), 8);
        assert_eq!(AROUND.load(Ordering::SeqCst), 1);
    }
}
