"""The Gradio app: thin views over the workbench core, one module per tab."""
