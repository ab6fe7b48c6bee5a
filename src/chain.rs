//! Walking a producer's `prev_api` chain (docs/design.md, "Rulings": prev_api): bounded,
//! cycle-safe, NULL-safe. One walk serves the selection of the table dlpx speaks, the exported
//! `dlpx_exchange_api_select` (which the C++ layer calls) and `dlpx.exchange_api_info`.

use crate::abi::*;
use crate::error::{Error, Result};

/// The most links followed in a `prev_api` chain before it is declared too long.
pub const MAX_CHAIN: usize = 16;

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// A NULL `prev_api` (or a NULL head).
    End,
    /// A header seen before.
    Cycle,
    /// More than [`MAX_CHAIN`] links.
    TooLong,
}

impl Ending {
    pub fn name(self) -> &'static str {
        match self {
            Ending::End => "end",
            Ending::Cycle => "cycle",
            Ending::TooLong => "too long",
        }
    }
}

/// The headers of a chain, head first, and how it ended.
pub struct Walk {
    pub links: Vec<*const DLPackExchangeAPIHeader>,
    pub ending: Ending,
}

/// Follows `prev_api` from `head`, reading only the stable header of each link.
///
/// # Safety
/// `head` is NULL or points to a readable table header whose `prev_api` links are readable.
pub unsafe fn walk(head: *const DLPackExchangeAPIHeader) -> Walk {
    let mut links = Vec::new();
    let mut current = head;
    while !current.is_null() {
        if links.contains(&current) {
            return Walk { links, ending: Ending::Cycle };
        }
        if links.len() == MAX_CHAIN {
            return Walk { links, ending: Ending::TooLong };
        }
        links.push(current);
        // SAFETY: per the contract; only the stable header is read.
        current = unsafe { (*current).prev_api };
    }
    Walk { links, ending: Ending::End }
}

/// The major version of a header the walk returned.
///
/// # Safety
/// `header` came from [`walk`] over a chain that is still alive.
pub unsafe fn major(header: *const DLPackExchangeAPIHeader) -> u32 {
    // SAFETY: per the contract.
    unsafe { (*header).version.major }
}

/// Walks a chain from `head` to the first table whose major version dlpx supports (1).
///
/// # Safety
/// `head` is NULL or points to a readable table header whose `prev_api` links are readable, and
/// every major-1 header starts a `DLPackExchangeAPI` that lives for the process.
pub unsafe fn select_supported(head: *const DLPackExchangeAPIHeader) -> Result<&'static DLPackExchangeAPI> {
    // SAFETY: per the contract.
    let walk = unsafe { walk(head) };
    // SAFETY: the walk read every one of these headers: they are readable.
    let majors: Vec<u32> = walk.links.iter().map(|&h| unsafe { major(h) }).collect();
    if let Some(i) = majors.iter().position(|&m| m == DLPACK_MAJOR_VERSION) {
        // SAFETY: per the contract, a major-1 header starts a v1 table that lives for the process.
        return Ok(unsafe { &*walk.links[i].cast::<DLPackExchangeAPI>() });
    }
    Err(Error::buffer(match walk.ending {
        Ending::Cycle => format!("the prev_api chain has a cycle after {} tables (majors {majors:?})", majors.len()),
        Ending::TooLong => format!("the prev_api chain is longer than {MAX_CHAIN} tables"),
        Ending::End if majors.is_empty() => "the exchange table pointer is NULL".to_string(),
        Ending::End => {
            format!("no table of major version {DLPACK_MAJOR_VERSION} in the prev_api chain (majors {majors:?})")
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null_mut;

    fn header(major: u32) -> Box<DLPackExchangeAPI> {
        Box::new(DLPackExchangeAPI {
            header: DLPackExchangeAPIHeader { version: DLPackVersion { major, minor: 0 }, prev_api: null_mut() },
            managed_tensor_allocator: None,
            managed_tensor_from_py_object_no_sync: None,
            managed_tensor_to_py_object_no_sync: None,
            dltensor_from_py_object_no_sync: None,
            current_work_stream: None,
        })
    }

    fn link(tables: &mut [Box<DLPackExchangeAPI>]) -> *const DLPackExchangeAPIHeader {
        for i in (1..tables.len()).rev() {
            let next = &mut tables[i].header as *mut DLPackExchangeAPIHeader;
            tables[i - 1].header.prev_api = next;
        }
        &tables[0].header
    }

    // The tests' chains are arrays of live tables, linked by `link` (a cycle by hand): every
    // header they reach is readable, which is all `walk` and `select_supported` ask.
    #[test]
    #[allow(clippy::undocumented_unsafe_blocks)]
    fn selects_the_first_major_one_table() {
        let mut tables = [header(3), header(2), header(1), header(1)];
        let head = link(&mut tables);
        let selected = unsafe { select_supported(head) }.ok().unwrap();
        assert!(std::ptr::eq(selected, &*tables[2]));
        let walked = unsafe { walk(head) };
        assert_eq!((walked.links.len(), walked.ending), (4, Ending::End));
    }

    #[test]
    #[allow(clippy::undocumented_unsafe_blocks)]
    fn refuses_null_cycles_long_chains_and_no_major_one() {
        assert!(unsafe { select_supported(std::ptr::null()) }.err().unwrap().fact().contains("NULL"));
        let mut only_two = [header(2)];
        let head = link(&mut only_two);
        assert!(unsafe { select_supported(head) }.err().unwrap().fact().contains("majors [2]"));

        let mut cycle = [header(3), header(2)];
        let head = link(&mut cycle);
        cycle[1].header.prev_api = &mut cycle[0].header;
        let walked = unsafe { walk(head) };
        assert_eq!((walked.links.len(), walked.ending), (2, Ending::Cycle));
        assert!(unsafe { select_supported(head) }.err().unwrap().fact().contains("cycle"));

        let mut long: Vec<_> = (0..MAX_CHAIN + 4).map(|_| header(2)).collect();
        let head = link(&mut long);
        assert_eq!(unsafe { walk(head) }.ending, Ending::TooLong);
        assert!(unsafe { select_supported(head) }.err().unwrap().fact().contains("longer than 16"));
    }
}
