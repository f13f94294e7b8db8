{
  "variables": {
    "tp_version": "<!(node -p \"require('./package.json').version\")"
  },
  "target_defaults": {
    "include_dirs": ["native"],
    "defines": ["TP_PACKAGE_VERSION=\"<(tp_version)\""],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17"],
    "cflags": ["-g", "-fno-omit-frame-pointer", "-Wall", "-Wextra"],
    "cflags_cc": ["-std=c++20", "-fexceptions", "-frtti"]
  },
  "targets": [
    {
      "target_name": "tensorpool",
      "sources": [
        "<!@(node -p \"const s = require('./native/sources.json'); [...s.pool, ...s.planning, ...s.addon].join(' ')\")"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      # Hidden symbols: calls inside the core are direct, not through the PLT (default visibility lets
      # another library interpose any of them), which made the replay ~25% slower; link-time optimisation
      # inlines the pool's calls across its files (another 3-20%). The module's entry point is exported by
      # node_api.h itself.
      "cflags": ["-fvisibility=hidden", "-flto=2"],
      "ldflags": ["-flto=2"]
    },
    {
      "target_name": "tensorpool-preload",
      "type": "shared_library",
      "product_extension": "so",
      "sources": [
        "<!@(node -p \"const s = require('./native/sources.json'); [...s.pool, ...s.preload].join(' ')\")"
      ],
      # The C++ runtime linked in, its symbols local (exports.map): a C program that loads the library maps
      # no libstdc++, libm or libgcc_s (1.5 MiB of their pages resident in /bin/true), and the host's own C++
      # runtime (node's) never meets ours. --wrap=malloc: that runtime's allocations are the library's own.
      # --gc-sections drops the functions nothing calls (557 KB of code and constants, 455 KB without them):
      # every program that loads the library holds pages of its code (the kernel maps up to 64 KiB around
      # each page a program touches; what every program runs lies together, native/preload/always_run.h, at
      # the start of the code, native/preload/always_run.ld).
      "cflags": ["-fvisibility=hidden", "-fPIC", "-ffunction-sections", "-fdata-sections"],
      "ldflags": ["-Wl,--no-undefined", "-Wl,--gc-sections", "-static-libstdc++", "-static-libgcc", "-Wl,--wrap=malloc",
                  "-Wl,--version-script=<(module_root_dir)/native/preload/exports.map", "-Wl,-fini=tp_preload_fini",
                  "-Wl,-T,<(module_root_dir)/native/preload/always_run.ld"],
      "libraries": ["-ldl", "-lpthread"]
    }
  ]
}
