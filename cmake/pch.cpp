// The translation unit that carries the shared precompiled header (see cmake/twist.cmake).
