//! What a test machine (common/vm.rs) boots from: the newest Debian
//! kernel in /boot with the modules its initramfs loads, whether a binary
//! is static, and the `newc` cpio archive the kernel unpacks.

use std::path::{Path, PathBuf};

/// What the initramfs loads, in this order after what each needs.
const MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "virtio_console",
    "virtio_net",
    "9pnet_virtio",
    "9p",
    "overlay",
    "crc32c_generic",
    "ext4",
];

/// The newest Debian kernel in /boot with its modules, and the paths of
/// the modules the initramfs loads, in load order.
pub fn kernel() -> Result<(PathBuf, Vec<PathBuf>), String> {
    let mut versions: Vec<String> = std::fs::read_dir("/boot")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version = name.strip_prefix("vmlinuz-")?.to_string();
            let modules = Path::new("/lib/modules").join(&version);
            modules.join("modules.dep").exists().then_some(version)
        })
        .collect();
    // By number: 6.1.0-57 after 6.1.0-9.
    versions.sort_by_key(|v| {
        v.split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u64>().unwrap_or(0))
            .collect::<Vec<_>>()
    });
    let version = versions
        .pop()
        .ok_or("no kernel with modules in /boot (Debian: linux-image-amd64)")?;
    let root = Path::new("/lib/modules").join(&version);
    let deps = std::fs::read_to_string(root.join("modules.dep")).map_err(|e| e.to_string())?;
    let builtin = std::fs::read_to_string(root.join("modules.builtin")).unwrap_or_default();
    let name = |path: &str| {
        let file = path.rsplit('/').next().unwrap_or(path);
        file.split('.').next().unwrap_or(file).replace('-', "_")
    };
    let needs: Vec<(String, &str, Vec<&str>)> = deps
        .lines()
        .filter_map(|l| {
            let (path, rest) = l.split_once(':')?;
            Some((name(path), path, rest.split_whitespace().collect()))
        })
        .collect();
    let mut order: Vec<PathBuf> = Vec::new();
    fn visit(
        path: &str,
        needs: &[(String, &str, Vec<&str>)],
        root: &Path,
        order: &mut Vec<PathBuf>,
    ) {
        let full = root.join(path);
        if order.contains(&full) {
            return;
        }
        if let Some((_, _, deps)) = needs.iter().find(|(_, p, _)| *p == path) {
            for dep in deps.iter().rev() {
                visit(dep, needs, root, order);
            }
        }
        order.push(full);
    }
    for module in MODULES {
        match needs.iter().find(|(n, _, _)| n == module) {
            Some((_, path, _)) => visit(path, &needs, &root, &mut order),
            None if builtin.lines().any(|l| name(l) == *module) => {}
            None => return Err(format!("kernel {version} has no module {module}")),
        }
    }
    Ok((Path::new("/boot").join(format!("vmlinuz-{version}")), order))
}

/// Whether an ELF file asks for a dynamic loader (a `PT_INTERP` header).
pub fn dynamic(elf: &[u8]) -> bool {
    // A little-endian field of `n` bytes at `o` (ELF64, x86-64).
    let at = |o: usize, n: usize| {
        elf.get(o..o.saturating_add(n))
            .map(|b| b.iter().rev().fold(0, |v, x| v << 8 | *x as usize))
    };
    let (Some(phoff), Some(size), Some(count)) = (at(0x20, 8), at(0x36, 2), at(0x38, 2)) else {
        return true;
    };
    (0..count).any(|i| at(phoff.saturating_add(i * size), 4) == Some(3))
}

/// A `newc` cpio archive, as the kernel unpacks an initramfs.
#[derive(Default)]
pub struct Cpio {
    bytes: Vec<u8>,
    inodes: u32,
}

impl Cpio {
    /// One entry; `rdev` is a device node's `major << 8 | minor`.
    pub fn add(&mut self, name: &str, mode: u32, rdev: u32, data: &[u8]) {
        self.inodes += 1;
        let fields = [
            self.inodes,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            rdev >> 8,
            rdev & 0xff,
            name.len() as u32 + 1,
            0,
        ];
        self.bytes.extend_from_slice(b"070701");
        for field in fields {
            self.bytes
                .extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        let len = self.bytes.len();
        self.bytes.resize(len.next_multiple_of(4), 0);
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.add("TRAILER!!!", 0, 0, b"");
        self.bytes
    }
}
