# Writes OUT: a C++ source whose dashboard_page() returns the text of IN (a raw string).
file(READ "${IN}" page)
string(FIND "${page}" ")ddprun_page\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw string's delimiter")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by embed_page.cmake: do not edit.\n"
  "#include \"launcher/health/dashboard_page.hpp\"\n"
  "namespace ddp::launcher::health {\n"
  "std::string_view dashboard_page() {\n"
  "  static constexpr char kPage[] = R\"ddprun_page(${page})ddprun_page\";\n"
  "  return {kPage, sizeof kPage - 1};\n}\n}  // namespace ddp::launcher::health\n")
file(RENAME "${OUT}.tmp" "${OUT}")
