#include "backends/cuda/program/kernel_arguments.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/ranges.h>

#include "lang/error.h"

namespace twist::cuda {

int swizzle_bytes(TensorMap::Swizzle s) {
  switch (s) {
    case TensorMap::Swizzle::none:
      return 0;
    case TensorMap::Swizzle::b32:
      return 32;
    case TensorMap::Swizzle::b64:
      return 64;
    case TensorMap::Swizzle::b128:
      return 128;
  }
  return 0;
}

TensorMapRequest tensor_map_request(const twist::Kernel &kernel, const TensorMap &map, const Scalars &scalars,
                                    CUdeviceptr address) {
  auto buffer = std::find_if(kernel.buffers.begin(), kernel.buffers.end(),
                             [&](const BufferArg &b) { return b.name == map.buffer; });
  if (buffer == kernel.buffers.end())
    fail("kernel {}: tensor map '{}' describes buffer '{}', which is not one of the kernel's buffers",
         kernel.name, map.name, map.buffer);
  TensorMapRequest r{map.name,     map.buffer,
                     buffer->type, evaluate_shape(map.extents, scalars),
                     map.box,      swizzle_bytes(map.swizzle),
                     address};
  int64_t map_elements = 1, buffer_elements = 1;
  for (int64_t e : r.extents) map_elements *= e;
  const std::vector<int64_t> buffer_shape = evaluate_shape(buffer->shape, scalars);
  for (int64_t e : buffer_shape) buffer_elements *= e;
  if (map_elements != buffer_elements)
    fail(
        "kernel {}: {} covers {} elements but buffer '{}' of shape [{}] has {}; a map may only regroup the "
        "buffer's dimensions",
        kernel.name, describe(r), map_elements, map.buffer, fmt::join(buffer_shape, ", "), buffer_elements);
  return r;
}

void check_offsets_fit(const twist::Kernel &kernel, const Scalars &scalars) {
  const std::set<std::string> past = buffers_past_32_bit_offsets(kernel, scalars);
  for (const BufferArg &b : kernel.buffers) {
    if (!past.count(b.name)) continue;
    const std::vector<int64_t> shape = evaluate_shape(b.shape, scalars);
    int64_t elements = 1;
    for (int64_t e : shape) elements *= e;
    fail(
        "kernel {}: {} buffer '{}' of shape [{}] has {} elements, past the {} that the generated kernel's "
        "32-bit offsets reach; split the call (fewer batches or heads per launch)",
        kernel.name, role_name(b.role), b.name, fmt::join(shape, ", "), elements,
        std::numeric_limits<int32_t>::max());
  }
}

KernelArguments::KernelArguments(const twist::Kernel &kernel,
                                 const std::map<std::string, CUdeviceptr> &addresses, const Scalars &scalars,
                                 const TensorMapEncoder &encode) {
  auto address_of = [&](const std::string &buffer) {
    auto it = addresses.find(buffer);
    if (it == addresses.end())
      fail("kernel {} reads buffer '{}', but no device buffer of that name was given", kernel.name, buffer);
    return it->second;
  };
  for (const BufferArg &b : kernel.buffers) addresses_.push_back(address_of(b.name));
  for (const ScalarArg &s : kernel.scalars) {
    auto it = scalars.find(s.name);
    if (it == scalars.end())
      fail("kernel {} takes scalar '{}', but no value was given for it", kernel.name, s.name);
    std::vector<unsigned char> bytes(s.type.bytes());
    if (s.type == i32) {
      if (it->second < std::numeric_limits<int32_t>::min() ||
          it->second > std::numeric_limits<int32_t>::max())
        fail("kernel {}: scalar '{}' = {} does not fit the kernel's 32-bit integer argument; split the call",
             kernel.name, s.name, it->second);
      const int32_t x = static_cast<int32_t>(it->second);
      std::memcpy(bytes.data(), &x, 4);
    } else if (s.type == f32) {
      const float x = static_cast<float>(it->second);
      std::memcpy(bytes.data(), &x, 4);
    } else if (s.type == f64) {
      std::memcpy(bytes.data(), &it->second, 8);
    } else {
      fail("kernel {}: scalar '{}' of type {} cannot be passed", kernel.name, s.name, type_name(s.type));
    }
    scalars_.push_back(std::move(bytes));
  }
  check_offsets_fit(kernel, scalars);
  for (const TensorMap &m : kernel.tensor_maps)
    tensor_maps_.push_back(encode(tensor_map_request(kernel, m, scalars, address_of(m.buffer))));
  for (CUdeviceptr &a : addresses_) pointers_.push_back(&a);
  for (auto &v : scalars_) pointers_.push_back(v.data());
  for (CUtensorMap &m : tensor_maps_) pointers_.push_back(&m);
}

}  // namespace twist::cuda
