"""The deploy pipeline, one small module per stage (tinyaot/api.py strings them together):

    compile.compile_model      ONNX -> quantized int8 graph + memory plan (Compiled)
    stage.stage_model          Compiled -> the vendorable folder (model C, kernels, build files, HAL, harness)
    build.build_verification_firmware   the staged folder -> firmware/firmware.elf
    verify.verify_under_qemu   the firmware under QEMU == numpy reference, each layer vs onnxruntime
    report.build_report        report.json's dict; report.report_md renders report.md
    evaluate.evaluate          accuracy: float vs tinyaot int8 (host C) vs onnxruntime int8
"""
