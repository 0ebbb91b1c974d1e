<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Controller;

use OCA\Istota\Service\PersonalSettingsService;
use OCP\AppFramework\Http\Attribute\ApiRoute;
use OCP\AppFramework\Http\Attribute\NoAdminRequired;
use OCP\AppFramework\Http\DataResponse;
use OCP\IL10N;
use OCP\IRequest;
use OCP\IUserSession;
use Psr\Log\LoggerInterface;

/**
 * PersonalSettingsController serves the logged-in user's Istota settings: persona,
 * timezone, e-mail addresses and calendars.
 */
class PersonalSettingsController extends OcsBaseController {
	public function __construct(
		IRequest $request,
		IUserSession $userSession,
		IL10N $l10n,
		LoggerInterface $logger,
		private readonly PersonalSettingsService $settings,
	) {
		parent::__construct($request, $userSession, $l10n, $logger);
	}

	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/settings')]
	public function get(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->settings->get($uid));
	}

	/** Changes the fields given; 422 invalid_settings with field-level problems. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'PUT', url: '/api/v1/me/settings')]
	public function update(mixed $persona = null, mixed $timezone = null, mixed $emails = null, mixed $calendars = null): DataResponse {
		$changes = ['persona' => $persona, 'timezone' => $timezone, 'emails' => $emails, 'calendars' => $calendars];
		return $this->forUser(fn (string $uid): array => $this->settings->update($uid, $changes));
	}
}
