//! Generates the C headers from the Rust ABI sources with cbindgen.
//!
//! Headers are always written to `OUT_DIR/include/hccl/`; a test compares them with the checked-in
//! copies under `include/hccl/`. With `HCCL_UPDATE_HEADERS=1` the checked-in copies are refreshed.

use std::path::{Path, PathBuf};

struct Header {
    file: &'static str,
    /// Rust sources cbindgen reads for this header.
    sources: &'static [&'static str],
    guard: &'static str,
    includes: &'static [&'static str],
    /// Extra text placed after the includes (constants, inline helpers).
    trailer: &'static str,
    /// Items emitted even though no function of this header uses them.
    export: &'static [&'static str],
}

const TYPES_TRAILER: &str = r#"
static const uint32_t COMM_NAME_MAX_LENGTH = 128;
static const uint32_t BUFFER_NAME_MAX_LENGTH = 128;
static const uint32_t UDI_MAX_LENGTH = 128;
static const uint32_t HCCL_COMM_ALGO_MAX_LENGTH = 1600;
static const uint32_t HCCL_COMM_CONFIG_INFO_BYTES = 24;
static const uint32_t HCCL_COMM_CONFIG_MAGIC_WORD = 0xf0f0f0f0;
static const uint32_t HCCL_COMM_CONFIG_VERSION = 10;
static const uint32_t HCCL_COMM_DEFAULT_BUFFSIZE = 200;
static const uint32_t HCCL_COMM_DEFAULT_DETERMINISTIC = 0;
static const uint32_t HCCL_COMM_DEFAULT_OP_EXPANSION_MODE = 0;
static const uint32_t HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET = 0xffffffff;
static const uint32_t HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET = 0xffffffff;
static const uint32_t HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET = 0xffffffff;
static const uint32_t HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET = 0xffffffff;
static const int32_t HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET = (int32_t)0xffffffff;
static const uint32_t HCCL_COMM_QOS_CONFIG_NOT_SET = 0xffffffff;
static const uint64_t HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE = 16;
"#;

const COMM_TRAILER: &str = r#"
/* Writes the versioned header and the "not set" value of every field, so that the library can
 * tell which fields the caller chose and which fields an older caller's struct lacks. */
static inline void HcclCommConfigInit(HcclCommConfig *config)
{
    typedef struct {
        size_t size;
        uint32_t magicWord;
        uint32_t version;
        uint64_t reserved;
    } HcclCommConfigInfo;
    HcclCommConfigInfo *info;
    if (!config) {
        return;
    }
    info = (HcclCommConfigInfo *)(void *)config;
    info->size = sizeof(HcclCommConfig);
    info->magicWord = HCCL_COMM_CONFIG_MAGIC_WORD;
    info->version = HCCL_COMM_CONFIG_VERSION;
    info->reserved = 0;
    config->hcclBufferSize = HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET;
    config->hcclDeterministic = HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET;
    config->hcclCommName[0] = '\0';
    config->hcclUdi[0] = '\0';
    config->hcclOpExpansionMode = HCCL_COMM_DEFAULT_OP_EXPANSION_MODE;
    config->hcclRdmaTrafficClass = HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET;
    config->hcclRdmaServiceLevel = HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET;
    config->hcclWorldRankID = 0;
    config->hcclJobID = 0;
    config->aclGraphZeroCopyEnable = 0;
    config->hcclExecTimeOut = HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET;
    config->hcclAlgo[0] = '\0';
    config->hcclRetryEnable[0] = '\0';
    config->hcclRetryParams[0] = '\0';
    config->hcclBufferName[0] = '\0';
    config->hcclQos = HCCL_COMM_QOS_CONFIG_NOT_SET;
    config->hcclSymWinMaxMemSizePerRank = HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE;
}
"#;

const HEADERS: &[Header] = &[
    Header {
        file: "hccl_types.h",
        sources: &["src/ffi/types.rs", "result-codes/src/table.rs"],
        guard: "HCCL_TYPES_H_",
        includes: &["stdint.h", "stddef.h", "stdbool.h"],
        trailer: TYPES_TRAILER,
        export: &[
            "HcclComm",
            "HcclConn",
            "HcclCommSymWindow",
            "HcclResult",
            "HcclReduceOp",
            "HcclDataType",
            "HcclSendRecvType",
            "HcclConfig",
            "HcclConfigValue",
            "HcclCommStatus",
            "HcclCMDType",
            "HcclCommConfigCapability",
            "HcclRootInfoDef",
            "HcclRootInfo",
            "HcclSendRecvItemDef",
            "HcclSendRecvItem",
            "HcclCommConfigDef",
            "HcclCommConfig",
            "HcclCommStateCallback",
        ],
    },
    Header {
        file: "hccl_comm.h",
        sources: &["src/ffi/comm_api.rs"],
        guard: "HCCL_COMM_H_",
        includes: &["hccl/hccl_types.h"],
        trailer: COMM_TRAILER,
        export: &[],
    },
    Header {
        file: "hccl.h",
        sources: &["src/ffi/coll_api.rs"],
        guard: "HCCL_H_",
        includes: &["acl/acl.h", "hccl/hccl_types.h", "hccl/hccl_comm.h"],
        trailer: "",
        export: &[],
    },
    Header {
        file: "hccl_ext.h",
        sources: &["src/ffi/ext_api.rs"],
        guard: "HCCL_EXT_H_",
        includes: &["hccl/hccl.h"],
        trailer: "",
        export: &["HcclExtCompressMethod"],
    },
];

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("include/hccl");
    std::fs::create_dir_all(&out).expect("create OUT_DIR/include/hccl");
    let base = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-env-changed=HCCL_UPDATE_HEADERS");
    let update = std::env::var("HCCL_UPDATE_HEADERS").is_ok_and(|v| v == "1");
    for h in HEADERS {
        for src in h.sources {
            println!("cargo:rerun-if-changed={src}");
        }
        let mut cfg = base.clone();
        cfg.include_guard = Some(h.guard.to_string());
        cfg.no_includes = true;
        let mut sys = Vec::new();
        let mut local = Vec::new();
        for inc in h.includes {
            if inc.contains('/') {
                local.push(inc.to_string());
            } else {
                sys.push(inc.to_string());
            }
        }
        cfg.sys_includes = sys;
        cfg.includes = local;
        if !h.trailer.is_empty() {
            cfg.after_includes = Some(h.trailer.to_string());
        }
        cfg.export.include = h.export.iter().map(|s| s.to_string()).collect();
        let mut builder = cbindgen::Builder::new().with_config(cfg);
        for src in h.sources {
            builder = builder.with_src(root.join(src));
        }
        let generated = builder
            .generate()
            .unwrap_or_else(|e| panic!("cbindgen failed on {:?}: {e}", h.sources));
        let target = out.join(h.file);
        generated.write_to_file(&target);
        if update {
            copy_if_changed(&target, &root.join("include/hccl").join(h.file));
        }
    }
    println!("cargo:rustc-env=HCCL_GENERATED_INCLUDE={}", out.display());
}

fn copy_if_changed(from: &Path, to: &Path) {
    let new = std::fs::read(from).expect("read generated header");
    if std::fs::read(to).ok().as_deref() != Some(new.as_slice()) {
        std::fs::create_dir_all(to.parent().expect("header dir")).expect("create include dir");
        std::fs::write(to, new).expect("write header");
    }
}
