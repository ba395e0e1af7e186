// TFRecord files: writing, sequential reading (plain, GZIP, ZLIB) and random access by offset. This
// header includes the four that hold them; code that needs one part can include that one.
//
//   record_format.h  the framing of a record, its CRCs and the errors they give
//   record_writer.h  RecordWriter: writes a file, optionally compressed and indexed
//   record_reader.h  RecordReader: reads a file front to back
//   record_file.h    RecordFile: reads records at known offsets, from many threads
#ifndef HVX_DATA_RECORD_H_
#define HVX_DATA_RECORD_H_

#include "hvx/data/record_file.h"
#include "hvx/data/record_format.h"
#include "hvx/data/record_reader.h"
#include "hvx/data/record_writer.h"

#endif  // HVX_DATA_RECORD_H_
