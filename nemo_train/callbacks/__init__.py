"""Lightning callbacks for evaluation and W&B logging. Import from their modules."""
