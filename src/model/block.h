// A block: the unit of partition, storage, optimization and communication (DESIGN.md §1).
// Its parameters are views into one contiguous flat working buffer; its gradients are views
// into one flat gradient buffer laid out the same way.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "base/model_shape.h"

namespace bcd {

// A slot (base/model_shape.h) placed in the block's flat buffer.
struct ParamSlot : SlotShape {
  int64_t offset = 0;  // elements from the start of the flat buffer
};

// A contiguous run of slots with the same part and decay flag, padded to Block::kAlign.
using Segment = SegmentShape;

class Block {
 public:
  // Slots are laid out grouped by part (in order of first appearance), decayed before not
  // decayed within a part; each such run is a Segment padded to kAlign elements, so an
  // optimizer treats a block (or one part of it) as a few flat ranges.
  static constexpr int64_t kAlign = kBlockAlign;  // base/model_shape.h: the layout is the model shape's

  // `storage`: the flat working buffer to use (numel() elements of opts' dtype, anywhere: a
  // streamed block's lives in host memory, model/llama.h), zeroed here; undefined: allocated.
  Block(std::string name, const std::vector<SlotShape>& slots, torch::TensorOptions opts, torch::Tensor storage = {});

  const std::string& name() const { return name_; }
  int64_t numel() const { return numel_; }
  const std::vector<ParamSlot>& slots() const { return slots_; }
  const std::vector<Segment>& segments() const { return segments_; }
  std::vector<Part> parts() const;  // distinct parts, in layout order

  // Flat working buffer (1-D); writing it changes what the model computes.
  torch::Tensor& data() { return data_; }
  const torch::Tensor& data() const { return data_; }
  // Flat gradient the optimizer reads: the sum over a step's micro-batches, undefined while the
  // block is frozen. It spans the trainable window (set_trainable), elements [grad_begin(),
  // grad_end()) of the flat buffer: the whole block unless a vocabulary slice trains.
  // In the working dtype, except for reduced-precision (bf16/fp16) blocks, whose
  // gradient is summed in fp32: autograd fills its own buffer in the working dtype
  // (autograd_grad()), and accumulate_grad() adds that into grad() after each backward, so
  // micro-batches are never summed, nor the gradient clipped, in bf16. The trainer's pass adds
  // the matrices' gradients (the head's, the layers') into grad() directly, each by one product
  // summed in fp32, and autograd's buffer reads zero there (model/llama.h: grad_into_blocks).
  torch::Tensor& grad() { return acc_.defined() ? acc_ : grad_; }
  const torch::Tensor& grad() const { return acc_.defined() ? acc_ : grad_; }
  int64_t grad_begin() const { return window_begin_; }
  int64_t grad_end() const { return window_end_; }
  // grad() over elements [begin, begin + len) of the block's flat buffer (within the window).
  torch::Tensor grad_range(int64_t begin, int64_t len) const;
  // What backward writes: grad() itself unless the block sums in fp32. Laid out as grad()
  // (the window's elements) unless the block's matrices sum directly (set_direct_sums): then only
  // the slots autograd fills, back to back (autograd_grad_of gives each one's view).
  torch::Tensor& autograd_grad() { return grad_; }
  const torch::Tensor& autograd_grad() const { return grad_; }
  // autograd_grad()'s view of a slot's gradient, (shape) of the slot; undefined when autograd
  // fills none for it (frozen, outside the window, or summed directly).
  torch::Tensor autograd_grad_of(const std::string& name) const;
  bool sums_grad_in_fp32() const { return acc_.defined(); }
  // grad()[begin, begin + len) += autograd_grad()[...], which then reads zero there (nothing to
  // do for blocks without a separate sum); elements of the flat buffer, within the window. The
  // no-argument form covers the whole window. A slot summed directly that autograd gave a
  // gradient of its own (a pass without grad_into_blocks) is a BCD_CHECK failure: that gradient
  // would be lost.
  void accumulate_grad(int64_t begin, int64_t len);
  void accumulate_grad() { accumulate_grad(window_begin_, window_end_ - window_begin_); }
  // Bytes of the gradient buffers held now (autograd's and the fp32 sum).
  int64_t grad_bytes() const;

  // The trainer's pass (model/llama.h: grad_into_blocks) adds the gradients of the slots flagged
  // (one flag per slot(), in slots() order) straight into a reduced-precision block's fp32 sum,
  // so autograd's working-dtype buffer holds only the other slots the window trains whole: 2
  // bytes a parameter of the active unit less (base/model_shape.h: grad_summed_directly), and
  // nothing for a vocabulary slice's rows (row_grad). Every pass that computes gradients must
  // then be the trainer's. Empty: off (autograd's buffer spans the window). No effect on fp32
  // blocks. Set while the block is frozen.
  void set_direct_sums(std::vector<bool> direct);

  // Parameter view by slot name; BCD_CHECK when absent.
  const torch::Tensor& param(const std::string& name) const;
  // The view of grad() (the sum the optimizer reads) for that slot; undefined while frozen or
  // when the window does not hold the whole slot.
  torch::Tensor grad_of(const std::string& name) const;
  // A matrix slot the window holds some rows of (a vocabulary slice): the view of grad() over
  // those rows, (rows, ...) of the slot's shape, and the first of them. Such a slot does not
  // require grad (autograd would compute the whole matrix's gradient): whoever computes with it
  // adds its rows' gradient here directly (model/llama.h). Undefined `sum` for any other slot.
  struct RowGrad {
    torch::Tensor sum;
    int64_t first_row = 0;
  };
  RowGrad row_grad(const std::string& name) const;
  bool has_param(const std::string& name) const;
  const std::vector<torch::Tensor>& params() const { return params_; }

  // Trainable: the views of the slots the window holds whole require grad and their .grad is a
  // view of the flat gradient buffer (autograd accumulates in place into an existing grad, so
  // backward fills the flat buffer). Frozen: no view requires grad and the gradient buffer is
  // released.
  // `part` limits requires_grad to that part's slots ("" = every slot). The window, elements
  // [begin, end) of the flat buffer (end < 0: to the block's end), is what the gradient buffer
  // spans: a slot it cuts must be cut between rows (row_grad).
  void set_trainable(bool trainable, Part part = Part::kNone, int64_t begin = 0, int64_t end = -1);
  bool trainable() const { return trainable_; }
  Part trainable_part() const { return trainable_part_; }
  void zero_grad();

  // Re-creates the parameter views over a new flat buffer of the same size and dtype
  // (used when a block's storage moves; see memory/).
  void rebind(torch::Tensor flat);

 private:
  void make_views();

  std::string name_;
  std::vector<ParamSlot> slots_;
  std::vector<Segment> segments_;
  int64_t numel_ = 0;
  Part trainable_part_ = Part::kNone;
  int64_t window_begin_ = 0, window_end_ = 0;  // the gradient buffer's elements while trainable
  torch::Tensor data_, grad_;
  torch::Tensor acc_;  // fp32 sum of grad_ over micro-batches (reduced-precision blocks)
  // With direct sums: where each slot autograd fills sits in grad_ (its flat offset, elements,
  // offset in grad_), in offset order; empty: grad_ is laid out as the window.
  struct AutogradPiece {
    int64_t flat, numel, at;
  };
  std::vector<AutogradPiece> pieces_;
  bool direct_mode_ = false;  // set_direct_sums was given flags: a reduced-precision grad_ holds pieces_ only
  std::vector<bool> direct_;  // per slot (slots_ order): summed directly
  std::vector<torch::Tensor> params_;
  bool trainable_ = false;
};

// A range of one block's flat gradient, and the rank whose optimizer shard owns it (data
// parallel with sharded state: only the owner holds its summed value after the reduction).
struct GradRange {
  int block = 0;
  int64_t begin = 0, len = 0;
  int rank = 0;
  bool operator==(const GradRange& o) const {
    return block == o.block && begin == o.begin && len == o.len && rank == o.rank;
  }
};

}  // namespace bcd
