//! Walking a producer's `prev_api` chain to the table whose major version dlpx speaks
//! (ruling 8): bounded, cycle-safe, NULL-safe.

use crate::abi::*;
use crate::error::{Error, Result};

/// The most links followed in a `prev_api` chain before it is declared cyclic or broken.
pub const MAX_CHAIN: usize = 16;

/// Walks a chain from `head` to the first table whose major version dlpx supports (1).
///
/// # Safety
/// `head` is NULL or points to a readable table header whose `prev_api` links are readable.
pub unsafe fn select_supported(head: *const DLPackExchangeAPIHeader) -> Result<&'static DLPackExchangeAPI> {
    let mut seen = Vec::new();
    let mut current = head;
    for _ in 0..MAX_CHAIN {
        if current.is_null() {
            break;
        }
        if seen.contains(&current) {
            return Err(Error::buffer(format!("the prev_api chain has a cycle after {} tables: {seen:?}", seen.len())));
        }
        seen.push(current);
        // SAFETY: per the contract; only the stable header is read before the major check.
        let header = unsafe { &*current };
        if header.version.major == DLPACK_MAJOR_VERSION {
            // SAFETY: a major-1 header is the start of a v1 DLPackExchangeAPI, alive for the process.
            return Ok(unsafe { &*current.cast::<DLPackExchangeAPI>() });
        }
        current = header.prev_api;
    }
    if !current.is_null() {
        return Err(Error::buffer(format!("the prev_api chain is longer than {MAX_CHAIN} tables")));
    }
    let majors: Vec<u32> = seen.iter().map(|h| unsafe { (**h).version.major }).collect();
    Err(Error::buffer(if majors.is_empty() {
            "the exchange table pointer is NULL".to_string()
        } else {
            format!("no table of major version {DLPACK_MAJOR_VERSION} in the prev_api chain (majors {majors:?})")
        },
    ))
}

