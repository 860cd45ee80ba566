# towerjit_embed_text(<target> <header> <namespace> <dir> <symbol>=<file> ...): compiles each
# <dir>/<file> into <target> as `extern const char <symbol>[]` in <namespace> (declared in
# <header>), regenerated when a file changes, so what the program hands a compiler at run time
# is the text in the repository.
function(towerjit_embed_text target header namespace dir)
  set(text "// Generated from ${dir} by cmake/EmbedText.cmake; do not edit.\n")
  string(APPEND text "#include \"${header}\"\nnamespace ${namespace} {\n")
  foreach(entry IN LISTS ARGN)
    string(REPLACE "=" ";" pair "${entry}")
    list(GET pair 0 symbol)
    list(GET pair 1 file)
    set(path "${dir}/${file}")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${path}")
    file(READ "${path}" content)
    string(APPEND text "extern const char ${symbol}[] = R\"tjembed(${content})tjembed\";\n")
  endforeach()
  string(APPEND text "}  // namespace ${namespace}\n")
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${target}_embedded.cpp")
  file(CONFIGURE OUTPUT "${out}" CONTENT "${text}" @ONLY)
  target_sources(${target} PRIVATE "${out}")
endfunction()
