{
  "targets": [
    {
      "target_name": "tensorpool",
      "sources": [
        "<!@(node -p \"const s = require('./native/sources.json'); s.core.concat(s.addon).join(' ')\")"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "native"
      ],
      "defines": [
        "NAPI_VERSION=8",
        "NAPI_CPP_EXCEPTIONS",
        "NODE_ADDON_API_DISABLE_DEPRECATED"
      ],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17"],
      "cflags": ["-g", "-fno-omit-frame-pointer", "-Wall", "-Wextra"],
      "cflags_cc": ["-std=c++20", "-fexceptions", "-frtti"]
    }
  ]
}
