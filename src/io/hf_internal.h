/* Helpers shared by the Hugging Face interop files (src/io/hf*.c, src/train/hf_convert*.c). */
#ifndef HP_IO_HF_INTERNAL_H
#define HP_IO_HF_INTERNAL_H

#include "hp/hf.h"

/* The file helpers are public (hp/hf.h): hp convert's run-directory code uses them too. */

#endif
