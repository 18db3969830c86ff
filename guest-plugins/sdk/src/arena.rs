//! A guest's allocator: one call's allocations from a zeroed region of the
//! initial linear memory, the standard allocator beyond it.
//!
//! An instance serves one call and is then reset, so its memory starts from
//! the same image every time. The standard allocator of
//! `wasm32-unknown-unknown` (dlmalloc) begins every call with an empty heap
//! and asks for more with `memory.grow`; for the host that is a change of
//! page protections on the way up, and another when the reset instance
//! shrinks back, each a TLB shootdown across the host's threads
//! (host/bench/results/findings.md, measured there). A region in
//! `.bss` is part of the module's initial memory, zero and unmapped until
//! touched, so a call that fits in it never grows memory at all. Nothing in
//! it is reused but the newest block (a growing vector, a temporary), which
//! is all one call needs; what does not fit goes to the standard allocator,
//! so a plugin that needs more gets it as before.
//!
//! On by default (feature `arena`); a plugin with an allocator of its own
//! turns the SDK's default features off.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, UnsafeCell};

/// Bytes of initial memory the region takes: four wasm pages.
pub const REGION: usize = 256 << 10;

/// The region and how much of it is handed out. Single-threaded: wasm32
/// guests have one thread, and native tests use one from one thread.
pub struct Region<const N: usize> {
    bytes: UnsafeCell<[u8; N]>,
    used: Cell<usize>,
}

// SAFETY: wasm32 guests (without the threads proposal, which no wasm-cni
// target enables) run on a single thread; nothing else can reach `used`.
#[cfg(target_arch = "wasm32")]
unsafe impl<const N: usize> Sync for Region<N> {}

impl<const N: usize> Region<N> {
    pub const fn new() -> Self {
        Region {
            bytes: UnsafeCell::new([0; N]),
            used: Cell::new(0),
        }
    }

    /// The block's offset in the region, if `ptr` is in it.
    fn offset(&self, ptr: *mut u8) -> Option<usize> {
        let at = (ptr as usize).checked_sub(self.bytes.get() as usize)?;
        (at < N).then_some(at)
    }

    /// `size` bytes aligned to `align` past what is handed out, if they fit.
    fn take(&self, size: usize, align: usize) -> Option<*mut u8> {
        let base = self.bytes.get() as usize;
        let start =
            (base.checked_add(self.used.get())?.checked_add(align - 1)? & !(align - 1)) - base;
        let end = start.checked_add(size).filter(|e| *e <= N)?;
        self.used.set(end);
        Some((base + start) as *mut u8)
    }
}

impl<const N: usize> Default for Region<N> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: blocks are in bounds, aligned and disjoint from every live block:
// `used` only moves back over the newest block, when it is the one freed or
// resized. Blocks outside the region are the system allocator's, passed back
// with their layouts.
unsafe impl<const N: usize> GlobalAlloc for Region<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.take(layout.size(), layout.align()) {
            Some(p) => p,
            // SAFETY: the caller's layout.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.offset(ptr) {
            Some(at) => {
                if at + layout.size() == self.used.get() {
                    self.used.set(at);
                }
            }
            // SAFETY: the system's block, with its layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    /// The newest block grows or shrinks where it is; any other block moves
    /// (the system's `realloc` is never called, which keeps dlmalloc's out
    /// of every guest: about 1.1 KB of code each).
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if let Some(at) = self.offset(ptr) {
            let newest = at + layout.size() == self.used.get();
            if newest && at.checked_add(new_size).is_some_and(|e| e <= N) {
                self.used.set(at + new_size);
                return ptr;
            }
        }
        // SAFETY: GlobalAlloc::realloc promises `new_size` with this
        // alignment is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid, non-zero layout.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both live and disjoint, each at least this long.
            unsafe { std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
            // SAFETY: the old block, with its layout.
            unsafe { self.dealloc(ptr, layout) };
        }
        new
    }
}

#[cfg(all(target_arch = "wasm32", feature = "arena"))]
#[global_allocator]
static ALLOC: Region<REGION> = Region::new();

#[cfg(test)]
mod tests {
    use super::*;

    fn l(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn blocks_are_aligned_and_disjoint_and_overflow_goes_to_the_system() {
        let r: Box<Region<512>> = Box::default();
        let mut live = Vec::new();
        for (i, (size, align)) in [(1, 1), (7, 4), (32, 32), (3, 2), (100, 8)]
            .into_iter()
            .enumerate()
        {
            let p = unsafe { r.alloc(l(size, align)) };
            assert_eq!(p as usize % align, 0);
            assert!(r.offset(p).is_some());
            unsafe { std::ptr::write_bytes(p, i as u8 + 1, size) };
            live.push((p, size, i as u8 + 1));
        }
        for (p, size, v) in &live {
            assert!(unsafe { std::slice::from_raw_parts(*p, *size) }
                .iter()
                .all(|b| b == v));
        }
        let big = unsafe { r.alloc(l(4096, 8)) };
        assert!(!big.is_null() && r.offset(big).is_none());
        unsafe { r.dealloc(big, l(4096, 8)) };
    }

    #[test]
    fn only_the_newest_block_grows_in_place_or_comes_back() {
        let r: Box<Region<256>> = Box::default();
        unsafe {
            let a = r.alloc(l(16, 8));
            std::ptr::write_bytes(a, 5, 16);
            assert_eq!(r.realloc(a, l(16, 8), 64), a);
            assert_eq!(r.used.get(), 64);
            let b = r.alloc(l(8, 8));
            let a2 = r.realloc(a, l(64, 8), 96);
            assert!(a2 != a && r.offset(a2).is_some());
            assert!(std::slice::from_raw_parts(a2, 16).iter().all(|x| *x == 5));
            let used = r.used.get();
            r.dealloc(a2, l(96, 8));
            assert_eq!(r.used.get(), used - 96, "the newest block comes back");
            let _e = r.alloc(l(8, 8));
            let used = r.used.get();
            r.dealloc(b, l(8, 8));
            assert_eq!(r.used.get(), used, "an older one does not");
            // Grown past the end: to the system, contents kept.
            let c = r.alloc(l(8, 8));
            std::ptr::write_bytes(c, 9, 8);
            let d = r.realloc(c, l(8, 8), 1024);
            assert!(!d.is_null() && r.offset(d).is_none());
            assert!(std::slice::from_raw_parts(d, 8).iter().all(|x| *x == 9));
            r.dealloc(d, l(1024, 8));
        }
    }
}
