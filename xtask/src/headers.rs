//! The public headers `include/nccl.h` and `include/rccl/rccl.h` are generated from one template,
//! `include/api.h.in`, so the declarations both flavours share are written once. Each generated
//! header stays self-contained: users copy one file and include it, as with NVIDIA's or AMD's.
//!
//! Template syntax, line by line:
//! - `@@nccl` / `@@rccl` start lines only that flavour gets (either may follow the other to
//!   switch), `@@end` returns to lines both get;
//! - `@@#` starts a comment about the template, dropped from both headers;
//! - `@STREAM@` anywhere is the flavour's stream type (`cudaStream_t`, `hipStream_t`).
//!
//! `cargo xtask headers` writes both headers, `cargo xtask headers --check` (and this crate's
//! test `checked_in_headers_are_generated`) fails when a checked-in header differs from what
//! the template gives.

use crate::{Flavour, workspace_root};
use std::path::PathBuf;

/// The template, below the workspace root.
pub const TEMPLATE: &str = "include/api.h.in";

/// The stream type the flavour's functions take.
pub fn stream_type(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::Nccl => "cudaStream_t",
        Flavour::Rccl => "hipStream_t",
    }
}

/// The flavour's header from the template's text.
pub fn generate(template: &str, flavour: Flavour) -> Result<String, String> {
    let mut out: Vec<String> = Vec::new();
    // None: lines for both; Some(f): lines for flavour f only.
    let mut only: Option<Flavour> = None;
    let mut opened_at = 0;
    for (n, line) in template.split('\n').enumerate() {
        let at = n + 1;
        match line.trim_end() {
            "@@nccl" | "@@rccl" => {
                only = Some(if line.trim_end() == "@@nccl" {
                    Flavour::Nccl
                } else {
                    Flavour::Rccl
                });
                opened_at = at;
                continue;
            }
            "@@end" => {
                if only.take().is_none() {
                    return Err(format!("{TEMPLATE}:{at}: @@end without @@nccl or @@rccl"));
                }
                continue;
            }
            l if l.starts_with("@@#") => continue,
            l if l.starts_with("@@") => {
                return Err(format!("{TEMPLATE}:{at}: unknown directive {l:?}"));
            }
            _ => {}
        }
        if only.is_some_and(|f| f != flavour) {
            continue;
        }
        let text = line.replace("@STREAM@", stream_type(flavour));
        // The headers use no '@' of their own, so any left is a misspelt placeholder.
        if text.contains('@') {
            return Err(format!("{TEMPLATE}:{at}: unknown placeholder in {line:?}"));
        }
        out.push(text);
    }
    if only.is_some() {
        return Err(format!(
            "{TEMPLATE}:{opened_at}: flavour section not closed with @@end"
        ));
    }
    Ok(out.join("\n"))
}

/// Path of the flavour's checked-in header.
pub fn header_path(flavour: Flavour) -> PathBuf {
    workspace_root().join("include").join(flavour.header())
}

fn read_template() -> Result<String, String> {
    let path = workspace_root().join(TEMPLATE);
    std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// The headers whose checked-in text differs from the template's (empty when all match).
pub fn stale_headers() -> Result<Vec<PathBuf>, String> {
    let template = read_template()?;
    let mut stale = Vec::new();
    for flavour in [Flavour::Nccl, Flavour::Rccl] {
        let want = generate(&template, flavour)?;
        let path = header_path(flavour);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
            stale.push(path);
        }
    }
    Ok(stale)
}

/// Writes both headers from the template; returns those it changed.
pub fn write_headers() -> Result<Vec<PathBuf>, String> {
    let template = read_template()?;
    let mut changed = Vec::new();
    for flavour in [Flavour::Nccl, Flavour::Rccl] {
        let want = generate(&template, flavour)?;
        let path = header_path(flavour);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
            std::fs::write(&path, &want).map_err(|e| format!("writing {}: {e}", path.display()))?;
            changed.push(path);
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_in_headers_are_generated() {
        let stale = stale_headers().expect("generate the headers");
        assert!(
            stale.is_empty(),
            "{stale:?} differ from what {TEMPLATE} gives: edit {TEMPLATE}, then run \
             `cargo xtask headers`"
        );
    }

    #[test]
    fn sections_and_placeholders() {
        let t = "a @STREAM@\n@@# note\n@@nccl\nn\n@@rccl\nr\n@@end\nz\n";
        assert_eq!(
            generate(t, Flavour::Nccl).unwrap(),
            "a cudaStream_t\nn\nz\n"
        );
        assert_eq!(generate(t, Flavour::Rccl).unwrap(), "a hipStream_t\nr\nz\n");
        assert!(generate("@@nccl\nx\n", Flavour::Nccl).is_err());
        assert!(generate("@@end\n", Flavour::Rccl).is_err());
        assert!(generate("@@if\n", Flavour::Rccl).is_err());
        assert!(generate("int @TYPO@;\n", Flavour::Rccl).is_err());
    }

    #[test]
    fn both_headers_share_most_of_the_template() {
        let template = read_template().unwrap();
        let (mut inside, mut shared) = (false, 0);
        for l in template.split('\n').map(str::trim_end) {
            match l {
                "@@nccl" | "@@rccl" => inside = true,
                "@@end" => inside = false,
                l if l.starts_with("@@") => {}
                _ if !inside => shared += 1,
                _ => {}
            }
        }
        // Today about 480 of nccl.h's 520 lines come from the shared part.
        assert!(shared > 400, "only {shared} shared lines");
    }
}
