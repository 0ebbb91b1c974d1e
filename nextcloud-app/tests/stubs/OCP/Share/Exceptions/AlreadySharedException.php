<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of OCP (stable31), only what the app uses.
 */

namespace OCP\Share\Exceptions;

use OCP\Share\IShare;

class AlreadySharedException extends GenericShareException {
	public function __construct(string $message, private IShare $existingShare) {
		parent::__construct($message);
	}

	public function getExistingShare(): IShare {
		return $this->existingShare;
	}
}
