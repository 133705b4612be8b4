//! A disk the campaign can stall: an ext4 file system on a loop device of its own, frozen
//! with `fsfreeze -f` and thawed with `fsfreeze -u`. While frozen, every write to it (a
//! `pwrite`, a store into a mapping, an `fdatasync`, a rename) waits in the kernel until
//! the thaw, as on a device that stopped answering; reads of what is cached go on.
//!
//! Mounting needs root (the campaign's machine runs as root; CI never draws this kind).
//! Invariant: a disk is never left frozen. A process blocked on a frozen file system
//! cannot be killed (it waits uninterruptibly), so [`FrozenDisk::thaw`] runs on drop and
//! the campaign's cluster thaws every disk before it kills its processes.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The image's size: sparse, so only what the broker writes takes space; large enough
/// that the broker's disk-space checks never refuse a write.
const IMAGE_BYTES: u64 = 4 << 30;

pub struct FrozenDisk {
    mount: PathBuf,
    frozen: bool,
    /// Holds the image and the mount point; removed after the unmount.
    _dir: tempfile::TempDir,
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|error| format!("{program}: {error}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{program} {}: {}; {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

impl FrozenDisk {
    /// Makes and mounts a fresh file system; panics, naming what failed and why, where
    /// the machine does not allow it.
    pub fn mount() -> FrozenDisk {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let image = dir.path().join("disk.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).expect("the mount point");
        std::fs::File::create(&image)
            .and_then(|file| file.set_len(IMAGE_BYTES))
            .expect("the disk image");
        let image_arg = image.to_str().expect("a UTF-8 path");
        let mount_arg = mount.to_str().expect("a UTF-8 path");
        let made = run("mkfs.ext4", &["-q", "-F", image_arg])
            .and_then(|()| run("mount", &["-o", "loop", image_arg, mount_arg]));
        if let Err(why) = made {
            panic!(
                "a DiskStall episode mounts a loop file system to freeze, and could not \
                 ({why}): run the campaign as root with loop devices, or leave out the \
                 DiskStall seeds"
            );
        }
        FrozenDisk {
            mount,
            frozen: false,
            _dir: dir,
        }
    }

    /// Where a broker's store goes.
    pub fn root(&self) -> &Path {
        &self.mount
    }

    pub fn freeze(&mut self) {
        let mount = self.mount.to_str().expect("a UTF-8 path");
        run("fsfreeze", &["-f", mount]).unwrap_or_else(|why| panic!("freeze: {why}"));
        self.frozen = true;
    }

    pub fn thaw(&mut self) {
        if !self.frozen {
            return;
        }
        let mount = self.mount.to_str().expect("a UTF-8 path");
        run("fsfreeze", &["-u", mount]).unwrap_or_else(|why| panic!("thaw: {why}"));
        self.frozen = false;
    }
}

impl Drop for FrozenDisk {
    fn drop(&mut self) {
        if self.frozen {
            let mount = self.mount.to_str().unwrap_or_default();
            if let Err(why) = run("fsfreeze", &["-u", mount]) {
                eprintln!("could not thaw {}: {why}", self.mount.display());
            }
        }
        // Lazy: a process of a failed episode may still hold a file open.
        let mount = self.mount.to_str().unwrap_or_default();
        if let Err(why) = run("umount", &["-l", mount]) {
            eprintln!("could not unmount {}: {why}", self.mount.display());
        }
    }
}
