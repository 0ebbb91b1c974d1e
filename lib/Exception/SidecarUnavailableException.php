<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Exception;

/**
 * SidecarUnavailableException covers everything that may succeed when simply tried again
 * later: connection refused, timeouts, and 5xx answers.
 */
class SidecarUnavailableException extends SidecarException {
	public function __construct(
		string $message,
		private readonly ?int $httpStatus = null,
		?\Throwable $previous = null,
		private readonly string $errorCode = '',
		private readonly string $sidecarMessage = '',
	) {
		parent::__construct($message, 0, $previous);
	}

	/** The stable error code of a 5xx answer, e.g. "unavailable"; "" when there was none. */
	public function getErrorCode(): string {
		return $this->errorCode;
	}

	/** error.message of a 5xx answer as the sidecar wrote it; "" when there was none. */
	public function getSidecarMessage(): string {
		return $this->sidecarMessage;
	}

	/** HTTP status of the answer, or null when no answer arrived at all. */
	public function getHttpStatus(): ?int {
		return $this->httpStatus;
	}
}
